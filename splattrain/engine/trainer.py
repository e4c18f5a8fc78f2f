"""The step-based trainer: data -> render -> loss -> backward -> densify -> optimize."""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from .. import interrupts
from ..checkpoints import rescue
from ..config import config_to_yaml
from ..console import Console
from ..distributed import DistContext, RankConsole
from ..errors import ConfigError, UserError
from ..hooks.base import Hook
from ..hooks.dispatch import HookDispatcher
from ..metrics import Evaluator
from ..optim import clear_grads, step_optimizers
from ..protocol import StepOutputs, StrategyContext
from ..registry import TRAINERS
from ..writers import WriterGroup, build_writers
from . import run_report, signals
from .batching import mean_losses, micro_batches
from .build import build_components, build_hooks
from .carry_out import CarryingOut
from .checkpoint_calls import CheckpointCalls
from .clock import LossAverage
from .failures import FailureHandling
from .requests import StepRequests, agree_on_step
from .row_edits import RowEdits
from .run_config import prepare_config
from .run_folder import RunFolder
from .run_state import RunState
from .setup import resolve_device, seed_everything
from .shadow import ShadowWeights
from .steering import SteeringCalls
from .validation import Validation


@TRAINERS.register("DefaultTrainer")
class DefaultTrainer(SteeringCalls, CheckpointCalls, CarryingOut, Validation, FailureHandling):
    """Trains a Gaussian scene from a resolved config, calling hooks at every point.

    Build it with a config from :func:`splattrain.engine.load_config` (``scaled``: the lines
    :func:`~splattrain.engine.load_run_config` gave), then call :meth:`train`.
    What hooks and plugins may read and call is the :class:`~splattrain.protocol.Trainer`
    protocol. Every attribute is assigned by this class and nowhere else; what the run changes as
    it trains is one value, :attr:`state` (a :class:`RunState`), which the properties hooks read
    (``step``, ``optimizers``, ``last_metrics``, ...) show. Its parts, each in a module of its own:
    :class:`SteeringCalls`, :class:`CheckpointCalls`, :class:`CarryingOut` (hooks' requests),
    :class:`Validation` and :class:`FailureHandling` (signals and failures). ``resume_command`` is
    the command line that resumes the run (shown when it stops).
    """

    def __init__(self, cfg: DictConfig, console: Optional[Console] = None, config_dir: Optional[Path] = None,
                 resume_command: Optional[str] = None, scaled: Sequence[str] = ()) -> None:
        self.cfg = cfg
        self.console = console or Console()
        scaled = prepare_config(cfg, config_dir) or scaled
        seed_everything(cfg.seed)
        self.dist = DistContext.from_env(cfg.trainer.dist_backend, resolve_device(cfg.trainer.device),
                                         cfg.trainer.dist_threads, cfg.trainer.dist_early_bytes)
        self.device = self.dist.device
        if not self.dist.is_main:
            self.console = RankConsole(self.dist.rank, self.console)
        self.run_folder = RunFolder.from_config(cfg, self.dist.is_main)
        self.run_dir = self.run_folder.run_dir
        self.resume_hint = resume_command or "splattrain fit --config <config> " + shlex.join(
            [f"output_dir={self.run_dir}", "--resume"])
        self.background = torch.tensor(list(cfg.data.background), dtype=torch.float32, device=self.device)

        built = build_components(cfg, self.dist, self.background, config_dir, self.console.info, self.console.warning,
                                 tuple(scaled))
        self.data, self.data_type, self.scene_scale = built.data, built.data_type, built.scene_scale
        self.model, self.renderer, self.strategy, self.loss = built.model, built.renderer, built.strategy, built.loss
        self.schedule, self.view_opt = built.schedule, built.view_opt
        self.state = RunState(optimizers=built.optimizers, schedulers=built.schedulers,  #: what the run changes
                              strategy_state=built.strategy_state, loss_average=LossAverage(cfg.trainer.loss_ema))
        self.row_edits = RowEdits()  #: the row changes hooks ask while a step's gradients are live
        self.strategy.add_reindex_listener(self.row_edits.follow)
        self.resolution = built.resolution  #: the coarse-to-fine schedule the steps follow (None: full resolution)
        self.densify_after_step = bool(cfg.optim.densify_after_step)
        self.replica_check_interval = int(cfg.trainer.replica_check_interval)  # read once: config reads are slow per step
        self.evaluator: Optional[Evaluator] = None
        self.shadow = ShadowWeights()  #: shadow weights a hook keeps (an average), swapped in by the engine
        self._shadow_follows = False
        self.writers = WriterGroup([], warn=self.console.warning)

        self.hooks = HookDispatcher(timing=cfg.trainer.hook_timing)
        for hook in build_hooks(cfg):
            self.register_hook(hook)
        needs = self.hooks.required_metrics()
        if needs:  # a metric a hook cannot do without is had now (weights fetched), or the run is refused
            self.evaluator = self._evaluator(needs)

        self.runtime_info: Dict[str, Any] = {}
        self.requests = StepRequests()  #: what hooks asked during the running step
        self._failed = False  # once the run failed: no collective exchange (the other ranks may be gone)
        self._checked: set = set()  # the plugins whose check passed
        self.check_plugins()

    # -- steering (the Trainer protocol; the calls that only delegate are SteeringCalls') ------
    @property
    def stop_reason(self) -> Optional[str]:
        """Why the run was asked to stop (None while it goes on)."""
        return self.state.stopped["reason"] if self.state.stopped else self.requests.stop

    def request_stop(self, reason: str) -> None:
        """End the run after the current step, with a final validation, a checkpoint and
        ``results.json`` recording ``stopped: {step, reason}`` (every rank stops at the same step)."""
        self.requests.ask_stop(reason)

    def request_validation(self) -> None:
        """Validate after the current step."""
        self.requests.validate = True

    def request_checkpoint(self, name: Optional[str] = None, keep_last: int = 0) -> None:
        """Save a resumable checkpoint after the current step and its validation:
        ``step_XXXXXX.pt`` (and ``last.pt``; ``keep_last`` > 0 keeps that many step checkpoints),
        or ``<name>.pt``."""
        self.requests.ask_checkpoint(name, keep_last)

    def keep_shadow(self, names: Sequence[str], validate: bool = True, export: bool = True) -> Dict[str, torch.Tensor]:
        """Shadow copies of the parameter groups ``names`` (an average a hook keeps): the live tensors
        the hook updates in place, moved with the Gaussians by the engine, swapped into the model for
        each validation (``validate``) and after training (``export``: checkpoints then hold them as
        their Gaussians, the training weights under ``training_gaussians``). After a resume it holds
        the checkpoint's shadow."""
        tensors = self.shadow.keep(self.model.params, names, validate, export)
        if not self._shadow_follows:
            self._shadow_follows = True
            self.on_gaussians_moved(self.shadow.follow)
        return tensors

    def request_pause(self, wait: Callable[[], bool]) -> None:
        """Pause after the current step (its validation and checkpoints done): the trainer calls
        ``wait()`` (each call short, say 0.1 s) until it returns False or a stop signal comes,
        carrying out the checkpoints asked meanwhile; hooks hear ``on_pause``."""
        self.requests.pause = wait

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Pause the run: hooks hear ``on_pause``; the time is left out of ``train_seconds``."""
        self.state.stopwatch.pause()
        self.call_hook("on_pause", True)
        try:
            yield
        finally:
            self.state.stopwatch.resume()
            self.call_hook("on_pause", False)

    def check_plugins(self) -> None:
        """Run the strategy's and every hook's ``check`` not run yet (when the trainer is built and
        before training): a ConfigError names the plugin."""
        plugins = [("strategy", self.strategy, getattr(self.strategy, "check", None))]
        plugins += [(f"hook {hook.name}", hook, method) for hook, method in self.hooks.entries["check"]]
        for what, plugin, method in plugins:
            if method is None or id(plugin) in self._checked:
                continue
            try:
                method(self)
            except UserError as err:
                raise ConfigError(f"{what}: {err}") from None
            self._checked.add(id(plugin))

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
        self.check_plugins()  # hooks registered since the trainer was built
        if self.evaluator is None:  # before the run: fetching LPIPS weights may be stopped like the command
            self.console.hold_log()
            self.evaluator = self._evaluator()
        self.run_folder.lock()
        try:
            resumed = self.run_folder.prepare(resume, overwrite, self.console.warning, self.read_checkpoint)
            with self.renderer.training_threads(), interrupts.during_run() as handled:
                if not handled and self.hooks.entries["on_signal"]:
                    self.console.warning("not in the main thread: stop signals are not handled")
                return self._run(resumed)
        finally:
            self.data.close()
            self.run_folder.release()

    def _run(self, resumed: Optional[tuple]) -> Dict[str, Any]:
        if resumed is not None:  # every check of the checkpoint passes before the run directory changes
            self.console.hold_log()
            try:
                self._restore(*resumed)
            except BaseException:
                self.dist.close()
                raise
        self._open_run_folder(resumed)
        try:
            self.call_hook("before_run")
            if resumed is not None:
                self.call_hook("after_load_checkpoint", resumed[1])
                self._finish_restored_step()
            state = self.state
            state.completed_step = state.start_step = state.step
            self._check_replicas("before training")
            self.call_hook("before_train")
            self.shadow.drop_unclaimed(self.console.warning)
            self._carry_out_pause()
            for step in range(state.step + 1, self.max_steps + 1):
                state.step = step
                state.stopwatch.start_step()
                self.train_step(step)
                state.stopwatch.end_step()
                self._act_on_signals(*signals.after_step(self.dist))  # on every rank alike
                validated = self.schedule.validates_at(step)
                if validated:
                    self.validate()
                if self._after_requests(step, validated):
                    break
            if self.shadow.export:  # the run ends with the shadow in the model (scene files, publish)
                self.shadow.swap_in(self.model.params)
            self.call_hook("after_train")
            self._act_on_signals(signals.after_last_step(self.dist), False, finished=True)
            run_report.print_hook_timing(self.console, self.hooks, state.train_seconds)
            report = run_report.results(state, self.data, self.model, self.view_opt)
            if self.is_main:
                run_report.write_results(report, self.run_dir / "results.json")
            return report
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

    def _open_run_folder(self, resumed: Optional[tuple]) -> None:
        """Create the run folder's files, start log.txt and the writers, print the header."""
        if self.is_main:
            text = config_to_yaml(self.cfg)
            notes = self.run_folder.open(text)
            self.console.open_log(self.run_dir / "log.txt")
            for note in notes:
                self.console.info(note)
            self.writers = build_writers(list(self.cfg.writers), self.run_dir, self.console.warning)
            self.writers.write_config(OmegaConf.to_container(self.cfg, resolve=True), text)
        gaussians = self.model.num_gaussians if resumed is None else int(resumed[1]["gaussians"]["means"].shape[0])
        run_report.print_header(self.console, self.cfg, gaussians, run_dir=self.run_dir, device=self.device,
                                dist=self.dist, data=self.data, data_type=self.data_type, renderer=self.renderer,
                                strategy=self.strategy, loss=self.loss, schedule=self.schedule,
                                resolution=self.resolution, hooks=self.hooks)

    def train_step(self, step: int) -> StepOutputs:
        """One optimisation step over ``trainer.batch_size`` x ``optim.accumulate_steps`` views,
        rendered ``batch_size`` at a time with their gradients summed; returns the outputs hooks saw.

        An ``after_backward`` hook may set ``outputs.skip_update`` to drop the step's update
        (densification statistics and optimizer step).
        """
        state = self.state
        state.before_step = rescue.state_before_step(self.data)
        if self.resolution is not None:
            self._follow_resolution(step)
        batch = self.data.next_train(step)
        state.stopwatch.data_ready()
        self.call_hook("before_train_iter", step, batch)
        schedule = self.schedule
        sh_degree = schedule.sh_degree_at(step)
        chunks = micro_batches(batch, schedule.batch_size)
        infos, terms, views = [], [], []
        self.row_edits.hold()  # row changes asked until the update is done wait for it
        for chunk in chunks:
            cameras = self.view_opt.cameras(chunk, step)
            render = self.renderer.render(self.model, cameras, sh_degree, chunk["background"],
                                          depth=schedule.render_depth)
            render.rgb = self.view_opt.colors(render.rgb, chunk)
            render.info["n_cameras"] = len(batch["camera"])  # gradients are of the mean over all the step's views
            losses = self.loss(render, chunk, self.model)
            penalty = self.view_opt.regularization(chunk)
            if penalty is not None:
                losses["view_opt"] = penalty
                losses["loss"] = losses["loss"] + penalty
            self.strategy.step_pre_backward(self.model.params, state.optimizers, state.strategy_state, step, render.info)
            self.call_hook("before_backward", step, losses)
            if chunk is chunks[-1]:  # the last backward pass finishes the gradients: their exchange may start in it
                self.dist.prepare_exchange(self.model.params, sh_degree)
            (losses["loss"] / len(chunks)).backward()
            infos.append(render.info)
            terms.append(losses)
            views.append(([camera.name or str(int(i)) for camera, i in zip(chunk["camera"], chunk["image_id"])], losses))
        signals.before_exchange(self.dist)  # a signal on any rank travels in the gradient exchange
        synced = {**state.optimizers, **{f"view_opt/{k}": v for k, v in self.view_opt.optimizers.items()}}
        losses = self.dist.sync_gradients(synced, mean_losses(terms), sh_degree)  # mean over ranks
        outputs = StepOutputs(render=render, losses=losses, sh_degree=sh_degree, batch=batch, view_losses=views)
        self.call_hook("after_backward", step, outputs)
        agree_on_step(self.dist, self.hooks.hooks, outputs)
        self._update(step, outputs, infos)
        clear_grads(state.optimizers)
        if self.row_edits.release(self._change_rows):  # the row changes hooks asked during the step
            self._check_not_empty(step)
        self.view_opt.step(step, update=not outputs.skip_update)
        for scheduler in state.schedulers:
            scheduler.step(step)
        state.completed_step = step  # the state is now step ``step``'s, whatever a hook does next
        state.loss_average.update(outputs.losses["loss"])
        state.stopwatch.lap(step, self.max_steps)  # what after_train_iter hooks read as trainer.clock
        self.call_hook("after_train_iter", step, batch, outputs)
        return outputs

    def _update(self, step: int, outputs: StepOutputs, infos: List[Dict[str, Any]]) -> None:
        """The optimizer step and the strategy's ``step_post_backward`` (with the step's
        :class:`StrategyContext`) in the configured order; neither when a hook skipped the update."""
        if outputs.skip_update:
            return
        state = self.state
        context = StrategyContext(step=step, batch=outputs.batch, render=outputs.render, infos=infos,
                                  last_metrics=state.last_metrics, renderer=self.renderer)
        if self.densify_after_step:  # gsplat's order: the step's update survives refinement
            self.call_hook("before_optimizer_step", step, outputs)
            step_optimizers(state.optimizers, infos)
            self.strategy.post_backward(self.model.params, state.optimizers, state.strategy_state, step, infos, context)
            self._check_not_empty(step)
        else:  # the 3DGS order
            self.strategy.post_backward(self.model.params, state.optimizers, state.strategy_state, step, infos, context)
            self._check_not_empty(step)
            self.call_hook("before_optimizer_step", step, outputs)
            step_optimizers(state.optimizers, infos)

    def _follow_resolution(self, step: int) -> None:
        """Serve the training views at the schedule's factor for ``step`` (a change is one line)."""
        factor = self.resolution.factor_at(step)
        if factor != self.data.train_downscale:
            self.data.set_train_downscale(factor)
            camera = self.data.train_frames[0].camera
            shown = "full" if factor == 1 else f"1/{factor:g}"
            self.console.info(f"step {step}: training at {shown} resolution ({camera.width}x{camera.height})")

    def _check_not_empty(self, step: int) -> None:
        if self.model.num_gaussians == 0:  # no rescue checkpoint: the emptied model is no step's state
            raise UserError(f"step {step}: strategy {self.cfg.strategy.get('type', 'default')!r} pruned every "
                            "Gaussian, nothing is left to train; relax its pruning settings (strategy.prune_opa); "
                            + self.run_folder.last_good_checkpoint())
