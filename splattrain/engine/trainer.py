"""The step-based trainer: data -> render -> loss -> backward -> densify -> optimize."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
from omegaconf import DictConfig, OmegaConf

from .. import __version__
from ..config import config_to_yaml
from ..console import Console
from ..data.loading import load_scene
from ..checkpoint import CheckpointError, config_changes, find_resume_checkpoint, load_checkpoint_file, save_checkpoint_file
from ..data.pipeline import DataPipeline, camera_scene_scale, focus_point
from ..errors import ConfigError, UserError
from ..hooks.base import Hook
from ..hooks.dispatch import HookDispatcher
from ..io.atomic import atomic_link, atomic_write_text
from ..io.ply import read_ply_gaussians
from ..losses import photometric_loss
from ..metrics import Evaluator, mean_metrics
from ..model.gaussians import GaussianModel, degree_for_step
from ..optim import build_optimizers, build_schedulers, clear_grads, step_optimizers
from ..registry import WRITERS
from ..render.splat_renderers import build_renderer
from ..strategy import build_strategy
from ..writers import Writer, WriterGroup
from .batching import StepSettings, mean_losses, micro_batches, views_per_step
from .setup import build_hook, hook_specs, import_user_modules, resolve_device, rng_states, seed_everything, set_rng_states


class DefaultTrainer:
    """Trains a Gaussian scene from a resolved config, calling hooks at every point.

    Build it with a config from :func:`splattrain.config.load_config`, then call
    :meth:`train`. Public attributes hooks may use: ``cfg``, ``console``, ``run_dir``,
    ``checkpoint_dir``, ``device``, ``step``, ``max_steps``, ``step_settings`` (the config values
    each step reads, taken once), ``data``, ``model``, ``renderer``, ``optimizers``,
    ``schedulers``, ``strategy``, ``strategy_state``, ``writers``, ``hooks``, ``last_metrics``.
    """

    def __init__(self, cfg: DictConfig, console: Optional[Console] = None, config_dir: Optional[Path] = None) -> None:
        self.cfg = cfg
        self.console = console or Console()
        self.run_dir = Path(cfg.output_dir)
        self.checkpoint_dir = self.run_dir / "ckpt"
        import_user_modules(list(cfg.imports), config_dir)
        seed_everything(cfg.seed)
        self.device = resolve_device(cfg.trainer.device)
        self.step = 0
        self.max_steps = int(cfg.trainer.max_steps)
        self.step_settings = StepSettings.from_config(cfg)
        self.background = torch.tensor(list(cfg.data.background), dtype=torch.float32, device=self.device)

        self.data_type, scene = load_scene(cfg.data)
        views = views_per_step(cfg.trainer.batch_size, cfg.optim.accumulate_steps, [f.camera for f in scene.train])
        self.data = DataPipeline(
            scene, self.background, self.device, seed=cfg.seed,
            random_background=cfg.data.random_background, prefetch=cfg.data.prefetch, views=views,
        )
        self.scene_scale = camera_scene_scale(self.data.train_cameras)
        self.model = self._build_model(scene).to(self.device)
        self.renderer = build_renderer(
            OmegaConf.to_container(cfg.renderer), self.device, log=self.console.info, warn=self.console.warning,
            absgrad=bool(cfg.strategy.absgrad),
        )
        self.optimizers = build_optimizers(self.model, cfg.optim, self.scene_scale)
        self.schedulers = build_schedulers(self.optimizers, cfg.optim, self.scene_scale, self.max_steps)
        self.strategy = build_strategy(cfg.strategy, self.renderer, warn=self.console.warning)
        self.strategy.check_sanity(self.model.params, self.optimizers)
        self.strategy_state = self.strategy.initialize_state(scene_scale=self.scene_scale)
        self.evaluator: Optional[Evaluator] = None
        self.writers = WriterGroup([], warn=self.console.warning)

        self.hooks = HookDispatcher(timing=cfg.trainer.hook_timing)
        for name, spec in hook_specs(cfg.default_hooks, list(cfg.custom_hooks)):
            self.register_hook(build_hook(name, spec))

        self.runtime_info: Dict[str, float] = {}
        self.resume_hint = f"splattrain fit --config <config> output_dir={self.run_dir} --resume"
        self.last_metrics: Dict[str, Any] = {}
        self.val_per_view: List[Dict[str, Any]] = []
        self.train_seconds = 0.0

    # -- building -------------------------------------------------------------------
    def _build_model(self, scene) -> GaussianModel:
        init = self.cfg.model.init
        generator = torch.Generator().manual_seed(self.cfg.seed)
        if init.ply is not None:
            return self._model_from_ply(init)
        use_points = init.type == "points" or (init.type == "auto" and scene.points is not None)
        if use_points:
            if scene.points is None:
                raise ConfigError(f"model.init.type is 'points' but {self.cfg.data.path} has no sparse points")
            return GaussianModel.from_points(
                torch.from_numpy(scene.points),
                torch.from_numpy(scene.point_colors).float() / 255.0,
                self.cfg.model.sh_degree,
                opacity=init.opacity,
                scale_factor=init.scale_factor,
                generator=generator,
            )
        return GaussianModel.random(
            init.num_points,
            focus_point(self.data.train_cameras),
            init.extent,
            self.cfg.model.sh_degree,
            opacity=init.opacity,
            scale_factor=init.scale_factor,
            generator=generator,
        )

    def _model_from_ply(self, init) -> GaussianModel:
        if init.type != "auto":
            raise ConfigError(f"model.init.ply is set, so model.init.type must be 'auto', not {init.type!r}")
        params, degree = read_ply_gaussians(init.ply)
        wanted = self.cfg.model.sh_degree
        if degree > wanted:
            raise ConfigError(f"model.init.ply '{init.ply}' has SH degree {degree}; set model.sh_degree={degree}")
        n = params["means"].shape[0]
        pad = torch.zeros(n, (wanted + 1) ** 2 - (degree + 1) ** 2, 3)
        params["shN"] = torch.cat([params["shN"], pad], dim=1)
        self.console.info(f"initialised {n} Gaussians from {init.ply}")
        return GaussianModel(params, wanted)

    def register_hook(self, hook: Hook) -> None:
        """Add a hook; dispatch tables are rebuilt so unused points stay free."""
        self.hooks.register(hook)

    def call_hook(self, point: str, *args: Any) -> None:
        """Call every hook overriding ``point``, in priority order."""
        entries = self.hooks.entries[point]
        if entries:
            self.hooks.run(point, entries, self, args)

    # -- the run --------------------------------------------------------------------
    def train(self, resume: Optional[str | Path] = None) -> Dict[str, Any]:
        """Run training to ``max_steps``; returns the results dict.

        ``resume`` is a checkpoint path, or ``"latest"`` for the newest intact checkpoint
        in the run directory.
        """
        self._open_run_dir()
        try:
            self._print_header()
            self.evaluator = Evaluator(self.cfg.metrics.lpips, self.cfg.metrics.lpips_net, self.device, self.console.warning)
            self.call_hook("before_run")
            if resume is not None:
                self.load_checkpoint(resume)
                if self.step >= self.max_steps:
                    self.console.warning(f"the checkpoint is at step {self.step}; trainer.max_steps is {self.max_steps}, nothing to train")
                elif self.cfg.trainer.val_on_resume:
                    self.validate()
            self.call_hook("before_train")
            for step in range(self.step + 1, self.max_steps + 1):
                self.step = step
                started = time.perf_counter()
                self.train_step(step)
                self.train_seconds += time.perf_counter() - started
                if self._validation_due(step):
                    self.validate()
            self.call_hook("after_train")
            self._print_hook_timing()
            return self._write_results()
        except BaseException as error:
            self._report_exception(error)
            raise
        finally:
            try:
                self.call_hook("after_run")
            finally:
                self.writers.close()
                self.console.close()

    def train_step(self, step: int) -> Dict[str, Any]:
        """One optimisation step over ``trainer.batch_size`` x ``optim.accumulate_steps`` views,
        rendered ``batch_size`` at a time with their gradients summed; returns the outputs hooks saw.

        An ``after_backward`` hook may set ``outputs["skip_update"]`` to drop the step's update
        (densification statistics and optimizer step).
        """
        batch = self.data.next_train(step)
        self.call_hook("before_train_iter", step, batch)
        settings = self.step_settings
        sh_degree = degree_for_step(step, settings.sh_degree_interval, settings.sh_degree)
        chunks = micro_batches(batch, settings.batch_size)
        infos, terms = [], []
        for chunk in chunks:
            render = self.renderer.render(
                self.model, chunk["camera"], sh_degree, chunk["background"], depth=settings.render_depth
            )
            losses = self._losses(render, chunk)
            render.info["n_cameras"] = len(batch["camera"])  # gradients are of the mean over all the step's views
            self.strategy.step_pre_backward(self.model.params, self.optimizers, self.strategy_state, step, render.info)
            (losses["loss"] / len(chunks)).backward()
            infos.append(render.info)
            terms.append(losses)
        outputs = {"render": render, "losses": mean_losses(terms), "sh_degree": sh_degree, "batch": batch}
        self.call_hook("after_backward", step, outputs)
        if not outputs.get("skip_update"):
            self.strategy.post_backward(self.model.params, self.optimizers, self.strategy_state, step, infos)
            step_optimizers(self.optimizers, infos)
        clear_grads(self.optimizers)
        for scheduler in self.schedulers:
            scheduler.step(step)
        self.call_hook("after_train_iter", step, batch, outputs)
        return outputs

    def _losses(self, render, batch: Dict[str, Any]) -> Dict[str, torch.Tensor]:
        """The photometric terms plus the strategy's regularisers; ``loss`` is their sum."""
        losses = photometric_loss(render.rgb, batch["image"], self.step_settings.ssim_lambda, batch.get("mask"))
        extra = self.strategy.regularization(self.model.params)
        if extra:
            losses = {**losses, **extra, "loss": losses["loss"] + sum(extra.values())}
        return losses

    def _validation_due(self, step: int) -> bool:
        interval = self.step_settings.val_interval
        periodic = interval > 0 and step % interval == 0 and step >= self.step_settings.val_begin
        return step == self.max_steps or periodic

    @torch.no_grad()
    def validate(self) -> Dict[str, Any]:
        """Render every test view, score it, and return the mean metrics."""
        if self.evaluator is None:
            self.evaluator = Evaluator(self.cfg.metrics.lpips, self.cfg.metrics.lpips_net, self.device, self.console.warning)
        self.call_hook("before_val")
        sh_degree = degree_for_step(self.step, self.step_settings.sh_degree_interval, self.step_settings.sh_degree)
        per_view: List[Dict[str, Any]] = []
        for index, batch in enumerate(self.data.test_batches()):
            self.call_hook("before_val_iter", index, batch)
            render = self.renderer.render(self.model, batch["camera"], sh_degree, self.background)
            scores = self.evaluator(render.rgb, batch["image"], batch.get("mask"))
            per_view.append({"view": batch["camera"][0].name, **scores})
            self.call_hook("after_val_iter", index, batch, {"render": render, "metrics": scores})
        metrics = {"step": self.step, **mean_metrics(per_view)}
        self.val_per_view = per_view
        self.last_metrics = metrics
        self.call_hook("after_val", metrics)
        return metrics

    # -- checkpoints ----------------------------------------------------------------
    def checkpoint_state(self) -> Dict[str, Any]:
        """Everything needed to continue this run; hooks add to it in before_save_checkpoint."""
        checkpoint = {
            "version": __version__,
            "step": self.step,
            "config": OmegaConf.to_container(self.cfg, resolve=True),
            "sh_degree": self.model.sh_degree,
            "gaussians": self.model.state_dict(),
            "world_transform": self.data.world_transform.clone(),
            "optimizers": {name: opt.state_dict() for name, opt in self.optimizers.items()},
            "strategy_state": self.strategy_state,
            "data": self.data.state_dict(),
            "rng": rng_states(),
            "train_seconds": self.train_seconds,
            "last_metrics": self.last_metrics,
            "hooks": {h.name: h.state_dict() for h in self.hooks.hooks if h.state_dict()},
        }
        self.call_hook("before_save_checkpoint", checkpoint)
        return checkpoint

    def save_checkpoint(self, path: Path, link_last: bool = True) -> Path:
        """Write a resumable checkpoint to ``path`` atomically (and point last.pt beside it at it)."""
        save_checkpoint_file(self.checkpoint_state(), path)
        if link_last:
            atomic_link(path, path.parent / "last.pt")
        return path

    def load_checkpoint(self, source: str | Path) -> Dict[str, Any]:
        """Restore a checkpoint (a path, or ``"latest"`` in the run directory) and continue from its step.

        Refuses a checkpoint whose scene or model settings differ from this config, listing
        the differences; other changes (more steps, hooks, writers) are reported and allowed.
        """
        if str(source) == "latest":
            path, checkpoint = find_resume_checkpoint(self.checkpoint_dir, self.console.warning)
        else:
            path, checkpoint = Path(source), load_checkpoint_file(source)
        if "optimizers" not in checkpoint:
            raise CheckpointError(f"'{path}' is a published checkpoint without training state; it cannot be resumed")
        incompatible, compatible = config_changes(checkpoint["config"], OmegaConf.to_container(self.cfg, resolve=True))
        if incompatible:
            raise CheckpointError(f"cannot resume from '{path}', the config changes: " + "; ".join(incompatible))
        if compatible:
            self.console.info("resuming with changed settings: " + "; ".join(compatible))
        self.model.load_state_dict(checkpoint["gaussians"])
        self.optimizers = build_optimizers(self.model, self.cfg.optim, self.scene_scale)
        self.schedulers = build_schedulers(self.optimizers, self.cfg.optim, self.scene_scale, self.max_steps)
        for name, optimizer in self.optimizers.items():
            optimizer.load_state_dict(checkpoint["optimizers"][name])
        self.strategy_state = _to_device(checkpoint["strategy_state"], self.device)
        self.data.load_state_dict(checkpoint["data"])
        set_rng_states(checkpoint["rng"])
        self.step = int(checkpoint["step"])
        self.train_seconds = float(checkpoint.get("train_seconds", 0.0))
        self.last_metrics = dict(checkpoint.get("last_metrics", {}))
        for scheduler in self.schedulers:
            scheduler.step(self.step)
        states = checkpoint.get("hooks", {})
        for hook in self.hooks.hooks:
            if hook.name in states:
                hook.load_state_dict(states[hook.name])
        self.call_hook("after_load_checkpoint", checkpoint)
        self.console.info(f"resumed from {path} at step {self.step}")
        return checkpoint

    # -- run directory ----------------------------------------------------------------
    def _open_run_dir(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.console.open_log(self.run_dir / "log.txt")
        text = config_to_yaml(self.cfg)
        atomic_write_text(self.run_dir / "config.yaml", text)
        writers = [w for w in (self._build_writer(dict(spec)) for spec in self.cfg.writers) if w is not None]
        self.writers = WriterGroup(writers, warn=self.console.warning)
        self.writers.write_config(OmegaConf.to_container(self.cfg, resolve=True), text)

    def _build_writer(self, spec: Dict[str, Any]) -> Optional[Writer]:
        """A writer from its spec; one that fails for a reason other than the config is skipped with a warning."""
        try:
            return WRITERS.build(spec, run_dir=self.run_dir)
        except UserError:
            raise
        except Exception as err:
            self.console.warning(f"writer {spec.get('type')!r} could not start ({type(err).__name__}: {err}); "
                                 "training goes on without it")
            return None

    def _print_header(self) -> None:
        """Scene, device, renderer, Gaussians and steps; the hook table with --verbose (always logged)."""
        camera = self.data.train_cameras[0]
        device = str(self.device)
        if self.device.type == "cuda":
            device += f" ({torch.cuda.get_device_name(self.device)})"
        self.console.info(
            f"[bold]splattrain {__version__}[/bold]  scene [bold]{self.cfg.name}[/bold]  "
            f"{self.data_type} {self.cfg.data.path}: {len(self.data.train_frames)} train / "
            f"{len(self.data.test_frames)} test views, {camera.width}x{camera.height}"
        )
        for note in self.data.scene.extra.get("notes", []):
            self.console.info(note)
        self.console.info(
            f"device {device}  renderer {type(self.renderer).__name__} ({self.renderer.rasterize_mode})  "
            f"gaussians {self.model.num_gaussians:,}  steps {self.max_steps:,}  run dir {self.run_dir}"
        )
        rows = [[p, ", ".join(n)] for p, n in self.hooks.table()]
        self.console.table("hooks", ["point", "hooks (priority)"], rows, terminal=self.console.verbose)

    def _print_hook_timing(self) -> None:
        if not self.hooks.timing or not self.hooks.seconds:
            return
        rows = self.hooks.timing_rows(self.train_seconds)
        total = sum(self.hooks.seconds.values())
        share = 100.0 * total / self.train_seconds if self.train_seconds > 0 else 0.0
        self.console.table(
            f"time in hooks: {total:.3f} s, {share:.2f}% of {self.train_seconds:.1f} s of training",
            ["hook", "point", "calls", "total s", "ms/call", "% of training"],
            rows,
        )

    def _report_exception(self, error: BaseException) -> None:
        try:
            self.call_hook("on_exception", error)
        except Exception as hook_error:  # keep the original error as the one raised
            self.console.warning(f"while handling {type(error).__name__}: {hook_error}")

    def _write_results(self) -> Dict[str, Any]:
        metrics = self.last_metrics
        results = {
            "psnr": metrics.get("psnr"),
            "ssim": metrics.get("ssim"),
            "lpips": metrics.get("lpips"),
            "num_gaussians": self.model.num_gaussians,
            "steps": self.step,
            "train_seconds": round(self.train_seconds, 3),
            "per_view": self.val_per_view,
        }
        atomic_write_text(self.run_dir / "results.json", json.dumps(results, indent=2) + "\n")
        return results


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    return value
