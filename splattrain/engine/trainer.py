"""The step-based trainer: data -> render -> loss -> backward -> densify -> optimize."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from omegaconf import DictConfig

from .. import interrupts
from ..checkpoint import save_checkpoint_file
from ..config.imports import import_user_modules
from ..console import Console
from ..errors import UserError
from ..distributed import DistContext, RankConsole
from ..hooks.base import Hook
from ..hooks.dist_check import DistributedCheckHook
from ..hooks.dispatch import HookDispatcher
from ..hooks.trainer_api import StepOutputs
from ..io.atomic import atomic_link
from ..metrics import Evaluator, mean_metrics
from ..model.gaussians import degree_for_step
from ..optim import clear_grads, step_optimizers
from ..registry import TRAINERS
from ..writers import WriterGroup
from . import checkpointing, rescue, run_files, signals
from .agreement import agree_on_requests, agree_on_step
from .batching import mean_losses, micro_batches
from .build import build_components, build_hooks, run_policy
from .setup import resolve_device, seed_everything


@TRAINERS.register("DefaultTrainer")
class DefaultTrainer:
    """Trains a Gaussian scene from a resolved config, calling hooks at every point.

    Build it with a config from :func:`splattrain.config.load_config`, then call
    :meth:`train`. What hooks and plugins may read and call is the
    :class:`~splattrain.hooks.trainer_api.Trainer` protocol; ``step_settings`` holds the config
    values each step reads, taken once.
    """

    def __init__(self, cfg: DictConfig, console: Optional[Console] = None, config_dir: Optional[Path] = None) -> None:
        self.cfg = cfg
        self.console = console or Console()
        self.run_dir = Path(cfg.output_dir)
        self.checkpoint_dir, self.rescue_on_error = run_policy(cfg)
        import_user_modules(list(cfg.imports), config_dir)
        seed_everything(cfg.seed)
        self.dist = DistContext.from_env(cfg.trainer.dist_backend, resolve_device(cfg.trainer.device),
                                         cfg.trainer.dist_threads, cfg.trainer.dist_early_bytes)
        self.device = self.dist.device
        if not self.dist.is_main:
            self.console = RankConsole(self.dist.rank, self.console)
        self.step = 0
        self.max_steps = int(cfg.trainer.max_steps)
        self.background = torch.tensor(list(cfg.data.background), dtype=torch.float32, device=self.device)

        built = build_components(cfg, self.dist, self.background, config_dir, self.console.info, self.console.warning)
        self.data, self.data_type, self.scene_scale = built.data, built.data_type, built.scene_scale
        self.model, self.renderer, self.strategy, self.loss = built.model, built.renderer, built.strategy, built.loss
        self.step_settings, self.optimizers, self.schedulers = built.step_settings, built.optimizers, built.schedulers
        self.strategy_state, self.view_opt = built.strategy_state, built.view_opt
        self.densify_after_step = bool(cfg.optim.densify_after_step)
        self.evaluator: Optional[Evaluator] = None
        self.writers = WriterGroup([], warn=self.console.warning)

        self.hooks = HookDispatcher(timing=cfg.trainer.hook_timing)
        for hook in build_hooks(cfg):
            self.register_hook(hook)
        DistributedCheckHook.ensure(self)
        needs = self.hooks.required_metrics()
        if needs:  # a metric a hook cannot do without is had now (weights fetched), or the run is refused
            self.evaluator = self._evaluator(needs)

        self.runtime_info: Dict[str, float] = {}
        self.resume_hint = "splattrain fit --config <config> " + shlex.join([f"output_dir={self.run_dir}", "--resume"])
        self.last_metrics: Dict[str, Any] = {}
        self.val_per_view: List[Dict[str, Any]] = []
        self.train_seconds = 0.0
        #: The last step whose update is applied, the step the run (or its resume) started at, and the
        #: data position and RNG states before the running step: what a rescue checkpoint needs.
        self.completed_step = self.start_step = 0
        self.state_before_step: Optional[Dict[str, Any]] = None
        #: Requests hooks made during the running step (acted on after it, agreed across ranks).
        self._stop_request: Optional[str] = None
        self._validation_request = self._checkpoint_request = False
        self.stopped: Optional[Dict[str, Any]] = None  #: ``{step, reason}`` once a requested stop ended the run

    # -- steering (the Trainer protocol) ------------------------------------------------
    @property
    def stop_reason(self) -> Optional[str]:
        """Why the run was asked to stop (None while it goes on)."""
        return self.stopped["reason"] if self.stopped else self._stop_request

    def request_stop(self, reason: str) -> None:
        """End the run after the current step, with a final validation, a checkpoint and
        ``results.json`` recording ``stopped: {step, reason}`` (every rank stops at the same step)."""
        if self._stop_request is None:
            self._stop_request = str(reason)

    def request_validation(self) -> None:
        """Validate after the current step."""
        self._validation_request = True

    def request_checkpoint(self) -> None:
        """Save a resumable checkpoint after the current step."""
        self._checkpoint_request = True

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
        if self.evaluator is None:  # before the run: fetching LPIPS weights may be stopped like the command
            self.console.hold_log()
            self.evaluator = self._evaluator()
        lock = run_files.lock_run_dir(self)
        try:
            resumed = run_files.check_run_dir(self, resume, overwrite)
            with self.renderer.training_threads(), interrupts.during_run() as handled:
                if not handled and signals.checkpoint_hooks(self):
                    self.console.warning("AutoCheckpointHook: not in the main thread, signals are not handled")
                return self._run(resumed)
        finally:
            self.data.close()
            lock.release()

    def _run(self, resumed: Optional[tuple]) -> Dict[str, Any]:
        checkpoint = None
        if resumed is not None:  # every check of the checkpoint passes before the run directory changes
            self.console.hold_log()
            try:
                checkpoint = self._restore(resumed)
            except BaseException:
                self.dist.close()
                raise
        self.writers = run_files.open_run_dir(self)
        try:
            run_files.print_header(self, resumed)
            self.call_hook("before_run")
            if checkpoint is not None:
                self.call_hook("after_load_checkpoint", checkpoint)
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
                signals.after_step(self)  # a stop signal ends the run here, on every rank alike
                validated = self._validation_due(step)
                if validated:
                    self.validate()
                if self._after_requests(step, validated):
                    break
            self.call_hook("after_train")
            signals.after_last_step(self)  # a signal on any rank since the last step stops every rank
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

    def _after_requests(self, step: int, validated: bool) -> bool:
        """Act on the step's requests as the ranks agree on them; True when the run stops here."""
        reason, validate, save = agree_on_requests(
            self, self._stop_request, self._validation_request, self._checkpoint_request)
        stop = reason is not None
        self._stop_request, self._validation_request, self._checkpoint_request = None, False, False
        if (validate or stop) and not validated:
            self.validate()
        if stop:
            self.stopped = {"step": step, "reason": reason}
            self.console.info(f"stopping after step {step}: {reason}")
        if save or stop:
            self.save_checkpoint(self.checkpoint_dir / f"step_{step:06d}.pt")
        return stop

    def train_step(self, step: int) -> StepOutputs:
        """One optimisation step over ``trainer.batch_size`` x ``optim.accumulate_steps`` views,
        rendered ``batch_size`` at a time with their gradients summed; returns the outputs hooks saw.

        An ``after_backward`` hook may set ``outputs.skip_update`` to drop the step's update
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
        signals.before_exchange(self)  # a signal on any rank travels in the gradient exchange
        synced = {**self.optimizers, **{f"view_opt/{k}": v for k, v in self.view_opt.optimizers.items()}}
        losses = self.dist.sync_gradients(synced, mean_losses(terms), sh_degree)  # mean over ranks
        outputs = StepOutputs(render=render, losses=losses, sh_degree=sh_degree, batch=batch)
        self.call_hook("after_backward", step, outputs)
        agree_on_step(self, outputs)
        if not outputs.skip_update:
            if self.densify_after_step:  # gsplat's order: the step's update survives refinement
                self.call_hook("before_optimizer_step", step, outputs)
                step_optimizers(self.optimizers, infos)
                self.strategy.post_backward(self.model.params, self.optimizers, self.strategy_state, step, infos)
                self._check_not_empty(step)
            else:  # the 3DGS order
                self.strategy.post_backward(self.model.params, self.optimizers, self.strategy_state, step, infos)
                self._check_not_empty(step)
                self.call_hook("before_optimizer_step", step, outputs)
                step_optimizers(self.optimizers, infos)
        clear_grads(self.optimizers)
        self.view_opt.step(step, update=not outputs.skip_update)
        for scheduler in self.schedulers:
            scheduler.step(step)
        self.completed_step = step  # the state is now step ``step``'s, whatever a hook does next
        self.call_hook("after_train_iter", step, batch, outputs)
        return outputs

    def _check_not_empty(self, step: int) -> None:
        if self.model.num_gaussians == 0:  # no rescue checkpoint: the emptied model is no step's state
            raise UserError(f"step {step}: strategy {self.cfg.strategy.get('type', 'default')!r} pruned every "
                            "Gaussian, nothing is left to train; relax its pruning settings (strategy.prune_opa); "
                            + rescue.last_good_checkpoint(self))

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
            signals.between_views(self)
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
        if getattr(self, "run_id", None):
            checkpoint["run_id"] = self.run_id  # resuming refuses another run's checkpoint
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
        checkpoint = self._restore(source)
        self.call_hook("after_load_checkpoint", checkpoint)
        return checkpoint

    def _restore(self, source: str | Path | tuple) -> Dict[str, Any]:
        """Load a checkpoint's state into the model, optimizers, strategy, data order, RNGs and hooks."""
        checkpoint = checkpointing.restore_checkpoint(self, source)
        self.dist.statistics_synced = True  # the restored statistics are totals: rank 0 keeps them
        self.strategy.release_statistics(self.strategy_state)
        return checkpoint

    def _evaluator(self, required: Sequence[Tuple[str, str]] = ()) -> Evaluator:
        metrics = self.cfg.metrics
        return Evaluator(metrics.lpips, metrics.lpips_net, self.device, self.console.warning, metrics.lpips_weights,
                         metrics.lpips_download, self.console.transfer, required)

    def _report_exception(self, error: BaseException) -> None:
        try:
            self.call_hook("on_exception", error)
        except Exception as hook_error:  # keep the original error as the one raised
            self.console.warning(f"while handling {type(error).__name__}: {hook_error}")
        if self.rescue_on_error and not isinstance(error, interrupts.RunInterrupted):
            try:
                rescue.save_rescue_checkpoint(self, error)
            except Exception as save_error:
                self.console.warning(f"could not save a rescue checkpoint ({type(save_error).__name__}: {save_error})")
