"""The step-based trainer: data -> render -> loss -> backward -> densify -> optimize."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
from omegaconf import DictConfig, OmegaConf

from .. import interrupts
from ..checkpoint import save_checkpoint_file
from ..config.imports import import_user_modules
from ..config.plugins import register_builtins
from ..config.steps import check_schedule
from ..console import Console
from ..data.loading import load_scene
from ..data.pipeline import DataPipeline, camera_scene_scale
from ..errors import UserError
from ..distributed import DistContext, RankConsole
from ..distributed.steps import agree_on_step
from ..hooks.base import Hook
from ..hooks.dist_check import DistributedCheckHook
from ..hooks.dispatch import HookDispatcher
from ..io.atomic import atomic_link
from ..losses import build_loss
from ..metrics import Evaluator, mean_metrics
from ..model.gaussians import degree_for_step
from ..optim import build_optimizers, build_schedulers, clear_grads, step_optimizers
from ..registry import TRAINERS
from ..render import build_renderer
from ..strategy import build_strategy
from ..view_opt import ViewCorrections
from ..writers import WriterGroup
from ..hooks.auto_checkpoint import RunInterrupted
from . import checkpointing, rescue, run_files
from .batching import StepSettings, mean_losses, micro_batches, views_per_step
from .model_init import build_model
from ..hooks.specs import build_hook, hook_specs
from .setup import resolve_device, seed_everything


@TRAINERS.register("DefaultTrainer")
class DefaultTrainer:
    """Trains a Gaussian scene from a resolved config, calling hooks at every point.

    Build it with a config from :func:`splattrain.config.load_config`, then call
    :meth:`train`. Public attributes hooks may use: ``cfg``, ``console``, ``run_dir``,
    ``checkpoint_dir``, ``device``, ``step``, ``max_steps``, ``step_settings`` (the config values
    each step reads, taken once), ``data``, ``model``, ``renderer``, ``loss``, ``optimizers``,
    ``schedulers``, ``strategy``, ``strategy_state``, ``view_opt`` (learned per-view appearance and
    pose corrections), ``writers``, ``hooks``, ``last_metrics``, ``dist`` (the rank context),
    ``rank``, ``world_size``, ``is_main`` (only rank 0 writes files).
    """

    def __init__(self, cfg: DictConfig, console: Optional[Console] = None, config_dir: Optional[Path] = None) -> None:
        self.cfg = cfg
        self.console = console or Console()
        self.run_dir = Path(cfg.output_dir)
        self.checkpoint_dir = self.run_dir / "ckpt"
        import_user_modules(list(cfg.imports), config_dir)
        register_builtins()
        seed_everything(cfg.seed)
        self.dist = DistContext.from_env(cfg.trainer.dist_backend, resolve_device(cfg.trainer.device),
                                         cfg.trainer.dist_threads, cfg.trainer.dist_early_bytes)
        self.device = self.dist.device
        if not self.dist.is_main:
            self.console = RankConsole(self.dist.rank, self.console)
        self.step = 0
        self.max_steps = int(cfg.trainer.max_steps)
        self.background = torch.tensor(list(cfg.data.background), dtype=torch.float32, device=self.device)

        self.data_type, scene = load_scene(cfg.data, config_dir=config_dir)
        views = views_per_step(cfg.trainer.batch_size, cfg.optim.accumulate_steps, [f.camera for f in scene.train])
        self.data = DataPipeline(
            scene, self.background, self.device, seed=cfg.seed,
            random_background=cfg.data.random_background, prefetch=cfg.data.prefetch, views=views,
            rank=self.dist.rank, world_size=self.dist.world_size,
        )
        self.scene_scale = camera_scene_scale(self.data.train_cameras)
        self.model = build_model(cfg, scene, self.data.train_cameras, self.console.info).to(self.device)
        strategy_spec = OmegaConf.to_container(cfg.strategy, resolve=True)
        self.renderer = build_renderer(
            OmegaConf.to_container(cfg.renderer, resolve=True), self.device, log=self.console.info,
            warn=self.console.warning, absgrad=bool(strategy_spec.get("absgrad", False)),
        )
        self.strategy = build_strategy(strategy_spec, self.renderer, warn=self.console.warning)
        check_schedule(self.strategy, self.max_steps, self.console.warning)
        self.strategy.set_statistics_reducer(self.dist if self.dist.enabled else None)
        self.loss = build_loss(OmegaConf.to_container(cfg.loss, resolve=True), self.strategy.default_loss_terms())
        self.loss.drop_unavailable(self, self.console.warning)
        self.step_settings = StepSettings.from_config(cfg, render_depth=self.loss.needs_depth)
        self.optimizers = build_optimizers(self.model, cfg.optim, self.scene_scale)
        self.schedulers = build_schedulers(self.optimizers, cfg.optim, self.scene_scale, self.max_steps)
        self.strategy.check_sanity(self.model.params, self.optimizers)
        self.strategy_state = self.strategy.initialize_state(scene_scale=self.scene_scale)
        self.view_opt = ViewCorrections(
            OmegaConf.to_container(cfg.appearance, resolve=True), OmegaConf.to_container(cfg.pose_opt, resolve=True),
            len(scene.train), self.device, self.renderer, self.max_steps,
            cameras=self.data.train_cameras, points=self.model.means.detach(), scene_scale=self.scene_scale,
        )
        self.evaluator: Optional[Evaluator] = None
        self.writers = WriterGroup([], warn=self.console.warning)

        self.hooks = HookDispatcher(timing=cfg.trainer.hook_timing)
        for name, spec in hook_specs(cfg.default_hooks, list(cfg.custom_hooks)):
            self.register_hook(build_hook(name, spec))
        DistributedCheckHook.ensure(self)

        self.runtime_info: Dict[str, float] = {}
        self.resume_hint = f"splattrain fit --config <config> output_dir={self.run_dir} --resume"
        self.last_metrics: Dict[str, Any] = {}
        self.val_per_view: List[Dict[str, Any]] = []
        self.train_seconds = 0.0
        #: The last step whose update is applied, the step the run (or its resume) started at, and the
        #: data position and RNG states before the running step: what a rescue checkpoint needs.
        self.completed_step = self.start_step = 0
        self.state_before_step: Optional[Dict[str, Any]] = None
        self.rescue_on_error = True

    @property
    def rank(self) -> int:
        """This process's rank (0 in a single process)."""
        return self.dist.rank

    @property
    def world_size(self) -> int:
        """The number of ranks training together."""
        return self.dist.world_size

    @property
    def is_main(self) -> bool:
        """True on rank 0, the rank that writes files and prints."""
        return self.dist.is_main

    def register_hook(self, hook: Hook) -> None:
        """Add a hook; dispatch tables are rebuilt so unused points stay free."""
        self.hooks.register(hook)

    def call_hook(self, point: str, *args: Any) -> None:
        """Call every hook overriding ``point``, in priority order."""
        entries = self.hooks.entries[point]
        if entries:
            self.hooks.run(point, entries, self, args)

    # -- the run --------------------------------------------------------------------
    def train(self, resume: Optional[str | Path] = None, overwrite: bool = False) -> Dict[str, Any]:
        """Run training to ``max_steps``; returns the results dict.

        ``resume`` is a checkpoint path, or ``"latest"`` for the newest intact checkpoint
        in the run directory. The run directory is locked for the whole run; a fresh run into
        one that holds checkpoints is refused unless ``overwrite`` (which moves them aside).
        Nothing in the run directory changes before these checks pass.
        """
        interrupts.check()  # a stop signal while the trainer was built: nothing to save yet
        lock = run_files.lock_run_dir(self)
        try:
            resumed = run_files.check_run_dir(self, resume, overwrite)
            with self.renderer.training_threads():
                return self._run(resumed)
        finally:
            self.data.close()
            lock.release()

    def _run(self, resumed: Optional[tuple]) -> Dict[str, Any]:
        self.writers = run_files.open_run_dir(self)
        try:
            run_files.print_header(self)
            self.evaluator = self._evaluator()
            self.call_hook("before_run")
            if resumed is not None:
                self.load_checkpoint(resumed)
                if self.step >= self.max_steps:
                    self.console.warning(f"the checkpoint is at step {self.step}; trainer.max_steps is {self.max_steps}, nothing to train")
                    if self.last_metrics.get("step") != self.step:
                        self.validate()  # the run stopped before its final validation
                elif self.cfg.trainer.val_on_resume:
                    self.validate()
            self.completed_step = self.start_step = self.step
            self.call_hook("before_train")
            for step in range(self.step + 1, self.max_steps + 1):
                self.step = step
                started = time.perf_counter()
                self.train_step(step)
                self.train_seconds += time.perf_counter() - started
                if self._validation_due(step):
                    self.validate()
            self.call_hook("after_train")
            run_files.print_hook_timing(self)
            return run_files.write_results(self, self.run_dir / "results.json")
        except BaseException as error:
            self._report_exception(error)
            raise
        finally:
            try:
                self.call_hook("after_run")
            finally:
                self.writers.close()
                self.console.close()
                self.dist.close()

    def train_step(self, step: int) -> Dict[str, Any]:
        """One optimisation step over ``trainer.batch_size`` x ``optim.accumulate_steps`` views,
        rendered ``batch_size`` at a time with their gradients summed; returns the outputs hooks saw.

        An ``after_backward`` hook may set ``outputs["skip_update"]`` to drop the step's update
        (densification statistics and optimizer step).
        """
        self.state_before_step = rescue.state_before_step(self)
        batch = self.data.next_train(step)
        self.call_hook("before_train_iter", step, batch)
        settings = self.step_settings
        sh_degree = degree_for_step(step, settings.sh_degree_interval, settings.sh_degree)
        chunks = micro_batches(batch, settings.batch_size)
        infos, terms = [], []
        for chunk in chunks:
            render = self.renderer.render(
                self.model, self.view_opt.cameras(chunk), sh_degree, chunk["background"], depth=settings.render_depth
            )
            render.rgb = self.view_opt.colors(render.rgb, chunk)
            render.info["n_cameras"] = len(batch["camera"])  # gradients are of the mean over all the step's views
            losses = self.loss(render, chunk, self.model)
            penalty = self.view_opt.regularization(chunk)
            if penalty is not None:
                losses["view_opt"] = penalty
                losses["loss"] = losses["loss"] + penalty
            self.strategy.step_pre_backward(self.model.params, self.optimizers, self.strategy_state, step, render.info)
            self.call_hook("before_backward", step, losses)
            if chunk is chunks[-1]:  # the last backward pass finishes the gradients: their exchange may start in it
                self.dist.prepare_exchange(self.model.params, sh_degree)
            (losses["loss"] / len(chunks)).backward()
            infos.append(render.info)
            terms.append(losses)
        synced = {**self.optimizers, **{f"view_opt/{k}": v for k, v in self.view_opt.optimizers.items()}}
        losses = self.dist.sync_gradients(synced, mean_losses(terms), sh_degree)  # mean over ranks
        outputs = {"render": render, "losses": losses, "sh_degree": sh_degree, "batch": batch}
        self.call_hook("after_backward", step, outputs)
        agree_on_step(self, outputs)
        if not outputs.get("skip_update"):
            self.strategy.post_backward(self.model.params, self.optimizers, self.strategy_state, step, infos)
            if self.model.num_gaussians == 0:
                raise UserError(f"step {step}: strategy {self.cfg.strategy.get('type', 'default')!r} pruned every "
                                "Gaussian, nothing is left to train; relax its pruning settings (strategy.prune_opa)")
            step_optimizers(self.optimizers, infos)
        clear_grads(self.optimizers)
        self.view_opt.step(step, update=not outputs.get("skip_update"))
        for scheduler in self.schedulers:
            scheduler.step(step)
        self.completed_step = step  # the state is now step ``step``'s, whatever a hook does next
        self.call_hook("after_train_iter", step, batch, outputs)
        return outputs

    def _validation_due(self, step: int) -> bool:
        interval = self.step_settings.val_interval
        periodic = interval > 0 and step % interval == 0 and step >= self.step_settings.val_begin
        return step == self.max_steps or periodic

    @torch.no_grad()
    def validate(self) -> Dict[str, Any]:
        """Render every test view, score it, and return the mean metrics."""
        if self.evaluator is None:
            self.evaluator = self._evaluator()
        self.call_hook("before_val")
        sh_degree = degree_for_step(self.step, self.step_settings.sh_degree_interval, self.step_settings.sh_degree)
        scored: List[tuple[int, Dict[str, Any]]] = []
        for index, batch in enumerate(self.data.test_batches()):
            if not self.dist.owns_view(index):  # several ranks share the test views
                continue
            self.call_hook("before_val_iter", index, batch)
            render = self.renderer.render(self.model, batch["camera"], sh_degree, self.background)
            scores = self.evaluator(render.rgb, batch["image"], batch.get("mask"))
            scored.append((index, {"view": batch["camera"][0].name, **scores}))
            self.call_hook("after_val_iter", index, batch, {"render": render, "metrics": scores})
        per_view = self.dist.gather_views(scored)
        metrics = {"step": self.step, **mean_metrics(per_view)}
        self.val_per_view = per_view
        self.last_metrics = metrics
        self.call_hook("after_val", metrics)
        return metrics

    # -- checkpoints ----------------------------------------------------------------
    def checkpoint_state(self) -> Dict[str, Any]:
        """Everything needed to continue this run; hooks add to it in before_save_checkpoint."""
        checkpoint = checkpointing.checkpoint_state(self)
        self.call_hook("before_save_checkpoint", checkpoint)
        return checkpoint

    def save_checkpoint(self, path: Path, link_last: bool = True) -> Path:
        """Write a resumable checkpoint to ``path`` atomically (and point last.pt beside it at it).
        Every rank calls it (hooks may compare the ranks); only rank 0 writes."""
        checkpoint = self.checkpoint_state()
        if not self.is_main:
            return path
        save_checkpoint_file(checkpoint, path)
        if link_last:
            atomic_link(path, path.parent / "last.pt")
        return path

    def load_checkpoint(self, source: str | Path | tuple) -> Dict[str, Any]:
        """Restore a checkpoint (a path, ``"latest"`` in the run directory, or what
        ``checkpointing.read_checkpoint`` returned) and continue from its step; refuses one whose
        scene or model settings differ from this config."""
        checkpoint = checkpointing.restore_checkpoint(self, source)
        self.dist.statistics_synced = True  # the restored statistics are totals: rank 0 keeps them
        self.strategy.release_statistics(self.strategy_state)
        self.call_hook("after_load_checkpoint", checkpoint)
        return checkpoint

    def _evaluator(self) -> Evaluator:
        metrics = self.cfg.metrics
        return Evaluator(metrics.lpips, metrics.lpips_net, self.device, self.console.warning, metrics.lpips_weights)

    def _report_exception(self, error: BaseException) -> None:
        try:
            self.call_hook("on_exception", error)
        except Exception as hook_error:  # keep the original error as the one raised
            self.console.warning(f"while handling {type(error).__name__}: {hook_error}")
        if self.rescue_on_error and not isinstance(error, RunInterrupted):
            try:
                rescue.save_rescue_checkpoint(self, error)
            except Exception as save_error:
                self.console.warning(f"could not save a rescue checkpoint ({type(save_error).__name__}: {save_error})")
