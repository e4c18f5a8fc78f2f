"""A run's full state as a checkpoint (:func:`capture`), and a checkpoint turned back into that
state (:func:`read_checkpoint` checks it, :func:`restore` loads it): the trainer assigns what
``restore`` returns to itself; the components it holds restore their own state in place."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Tuple

import torch
from omegaconf import DictConfig, OmegaConf

from .. import __version__
from ..checkpoints.files import (
    RESUME_KEYS, config_changes, find_resume_checkpoint, load_checkpoint_file, require_keys,
)
from ..checkpoints.renderer_state import renderer_entry, restore_renderer
from ..checkpoints.schema import check_resume, check_scene
from ..data.pipeline import DataPipeline
from ..errors import CheckpointError
from ..hooks.dispatch import HookDispatcher
from ..model.gaussians import GaussianModel
from ..optim import build_optimizers, build_schedulers
from ..render.base import Renderer
from ..view_opt import ViewCorrections
from .clock import LossAverage
from .setup import rng_states, set_rng_states
from .shadow import ShadowWeights

Message = Callable[[str], None]


class TrainingState(Protocol):
    """What a checkpoint holds of a run (the :class:`~splattrain.engine.DefaultTrainer` has it)."""

    cfg: DictConfig
    data_type: str
    scene_scale: float
    device: torch.device
    max_steps: int
    model: GaussianModel
    renderer: Renderer
    data: DataPipeline
    optimizers: Dict[str, torch.optim.Optimizer]
    strategy: Any
    strategy_state: Dict[str, Any]
    view_opt: ViewCorrections
    train_seconds: float
    last_metrics: Dict[str, Any]
    hooks: HookDispatcher
    shadow: ShadowWeights
    loss_ema: LossAverage


@dataclass
class Restored:
    """What :func:`restore` rebuilt, for the trainer to take over."""

    step: int
    optimizers: Dict[str, torch.optim.Optimizer]
    schedulers: List[Any]
    strategy_state: Dict[str, Any]
    train_seconds: float
    last_metrics: Dict[str, Any]


def capture(run: TrainingState, step: int, rng: Mapping[str, Any] | None = None) -> Dict[str, Any]:
    """Everything needed to continue ``run`` after ``step`` (hooks' states keyed by ``state_key``);
    ``rng`` replaces the current RNG states (those before a failed step, for a rescue)."""
    return {
        "version": __version__,
        "step": step,
        "config": OmegaConf.to_container(run.cfg, resolve=True),
        "sh_degree": run.model.sh_degree,
        **run.shadow.checkpoint_entries(run.model.state_dict()),  # gaussians (and the shadow's keys)
        "world_transform": run.data.world_transform.clone(),
        "data_type": run.data_type,  # the dataset reader (what data.type auto chose)
        "optimizers": {name: opt.state_dict() for name, opt in run.optimizers.items()},
        "strategy_state": run.strategy_state,
        "view_opt": run.view_opt.state_dict(),
        "renderer": renderer_entry(run.renderer),
        "data": run.data.state_dict(),
        "global_views": run.data.views * run.data.world_size,  # views per step over all ranks
        "rng": {**rng_states(), **(rng or {})},
        "train_seconds": run.train_seconds,
        "loss_average": run.loss_ema.value,  # the loss EMA the log shows (read back here only)
        "last_metrics": run.last_metrics,
        "hooks": {h.state_key: state for h in run.hooks.hooks if (state := h.state_dict())},
    }


def read_checkpoint(run: TrainingState, source: str | Path, checkpoint_dir: Path,
                    warn: Message) -> Tuple[Path, Dict[str, Any]]:
    """Find and load ``source`` (a path, or ``"latest"`` in ``checkpoint_dir``) and check that it can
    continue ``run``; changes nothing. Refuses a checkpoint whose scene or model settings differ
    from the run's config, listing the differences."""
    if str(source) == "latest":
        path, checkpoint = find_resume_checkpoint(checkpoint_dir, warn)
    else:
        path, checkpoint = Path(source), load_checkpoint_file(source)
    if "optimizers" not in checkpoint:
        raise CheckpointError(f"'{path}' is a published checkpoint without training state; it cannot be resumed")
    require_keys(checkpoint, path, RESUME_KEYS, "resume a run")
    check_scene(checkpoint, path)
    incompatible, _ = config_changes(checkpoint["config"], OmegaConf.to_container(run.cfg, resolve=True))
    if incompatible:
        raise CheckpointError(f"cannot resume from '{path}', the config changes: " + "; ".join(incompatible))
    check_resume(checkpoint, path, run.optimizers, run.strategy, run.scene_scale, len(run.data.train_frames))
    return path, checkpoint


def restore(run: TrainingState, path: Path, checkpoint: Dict[str, Any], info: Message, warn: Message) -> Restored:
    """Load a checkpoint that :func:`read_checkpoint` passed into ``run``'s model, data order, view
    corrections, RNGs and hooks (in place), and return the optimizers, schedulers and values the
    trainer takes over. Config changes other than those refused (more steps, hooks, writers) are
    reported and allowed."""
    _, compatible = config_changes(checkpoint["config"], OmegaConf.to_container(run.cfg, resolve=True))
    if compatible:
        info("resuming with changed settings: " + "; ".join(compatible))
    cfg = run.cfg
    run.model.load_state_dict(checkpoint["gaussians"])
    run.shadow.restore(checkpoint, run.model.params)
    restore_renderer(run.renderer, checkpoint, path)
    optimizers = build_optimizers(run.model, cfg.optim, run.scene_scale)
    schedulers = build_schedulers(optimizers, cfg.optim, run.scene_scale, run.max_steps)
    for name, optimizer in optimizers.items():
        optimizer.load_state_dict(checkpoint["optimizers"][name])
    run.data.load_state_dict(checkpoint["data"])
    run.view_opt.load_state_dict(checkpoint.get("view_opt", {}), warn)
    saved_views, views = checkpoint.get("global_views"), run.data.views * run.data.world_size
    if saved_views is not None and saved_views != views:
        warn(f"the checkpoint trained on {saved_views} views per step over all ranks, this run on {views} "
             "(trainer.batch_size x optim.accumulate_steps x ranks): the view order continues differently")
    set_rng_states(checkpoint["rng"])
    run.loss_ema.restore(_loss_average(checkpoint))
    step = int(checkpoint["step"])
    for scheduler in schedulers:
        scheduler.step(step)
    states = checkpoint.get("hooks", {})
    for hook in run.hooks.hooks:
        if hook.state_key in states:
            try:
                hook.load_state_dict(states[hook.state_key])
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
                raise CheckpointError(f"checkpoint '{path}': the state of hook {hook.state_key!r} does not fit "
                                      f"it ({type(err).__name__}: {err})") from None
    info(f"resumed from {path} at step {step}")
    return Restored(step=step, optimizers=optimizers, schedulers=schedulers,
                    strategy_state=_to_device(checkpoint["strategy_state"], run.device),
                    train_seconds=float(checkpoint.get("train_seconds", 0.0)),
                    last_metrics=dict(checkpoint.get("last_metrics", {})))


def _loss_average(checkpoint: Mapping[str, Any]) -> Optional[float]:
    """The checkpoint's loss EMA; a checkpoint from before the engine kept it has LogHook's."""
    if "loss_average" in checkpoint:
        return checkpoint["loss_average"]
    logged = checkpoint.get("hooks", {}).get("logger")
    value = logged.get("ema_loss") if isinstance(logged, Mapping) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    return value
