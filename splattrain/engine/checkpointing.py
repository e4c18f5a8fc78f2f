"""A run's full state as a checkpoint (:func:`capture`), and a checkpoint turned back into that
state (:func:`read_checkpoint` checks it, :func:`restore` loads it). Each takes the
:class:`~splattrain.engine.run_state.RunState` and the components whose state a checkpoint holds;
the components restore their own state in place, :func:`restore` sets the run state's."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

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
from ..hooks.base import Hook
from ..model.gaussians import GaussianModel
from ..optim import build_optimizers, build_schedulers
from ..render.base import Renderer
from ..strategy.protocol import Strategy
from ..view_opt import ViewCorrections
from .run_state import RunState
from .setup import rng_states, set_rng_states
from .shadow import ShadowWeights

Message = Callable[[str], None]


def capture(state: RunState, step: int, *, cfg: DictConfig, model: GaussianModel, shadow: ShadowWeights,
            data: DataPipeline, data_type: str, renderer: Renderer, view_opt: ViewCorrections,
            hooks: Sequence[Hook], rng: Mapping[str, Any] | None = None) -> Dict[str, Any]:
    """Everything needed to continue the run after ``step``: ``state`` and the components' states
    (hooks' keyed by ``state_key``); ``rng`` replaces the current RNG states (those before a failed
    step, for a rescue)."""
    return {
        "version": __version__,
        "step": step,
        "config": OmegaConf.to_container(cfg, resolve=True),
        "sh_degree": model.sh_degree,
        **shadow.checkpoint_entries(model.state_dict()),  # gaussians (and the shadow's keys)
        "world_transform": data.world_transform.clone(),
        "data_type": data_type,  # the dataset reader (what data.type auto chose)
        "optimizers": {name: opt.state_dict() for name, opt in state.optimizers.items()},
        "strategy_state": state.strategy_state,
        "view_opt": view_opt.state_dict(),
        "renderer": renderer_entry(renderer),
        "data": data.state_dict(),
        "global_views": data.views * data.world_size,  # views per step over all ranks
        "rng": {**rng_states(), **(rng or {})},
        "train_seconds": state.train_seconds,
        "loss_average": state.loss_average.value,  # the loss EMA the log shows (read back here only)
        "last_metrics": state.last_metrics,
        "hooks": {h.state_key: saved for h in hooks if (saved := h.state_dict())},
    }


def read_checkpoint(source: str | Path, checkpoint_dir: Path, warn: Message, *, state: RunState, cfg: DictConfig,
                    strategy: Strategy, scene_scale: float, data: DataPipeline) -> Tuple[Path, Dict[str, Any]]:
    """Find and load ``source`` (a path, or ``"latest"`` in ``checkpoint_dir``) and check that it can
    continue the run of ``cfg`` (its ``state``, ``strategy`` and ``data``); changes nothing. Refuses
    a checkpoint whose scene or model settings differ from ``cfg``, listing the differences."""
    if str(source) == "latest":
        path, checkpoint = find_resume_checkpoint(checkpoint_dir, warn)
    else:
        path, checkpoint = Path(source), load_checkpoint_file(source)
    if "optimizers" not in checkpoint:
        raise CheckpointError(f"'{path}' is a published checkpoint without training state; it cannot be resumed")
    require_keys(checkpoint, path, RESUME_KEYS, "resume a run")
    check_scene(checkpoint, path)
    incompatible, _ = config_changes(checkpoint["config"], OmegaConf.to_container(cfg, resolve=True))
    if incompatible:
        raise CheckpointError(f"cannot resume from '{path}', the config changes: " + "; ".join(incompatible))
    check_resume(checkpoint, path, state.optimizers, strategy, scene_scale, len(data.train_frames))
    return path, checkpoint


def restore(state: RunState, path: Path, checkpoint: Dict[str, Any], info: Message, warn: Message, *,
            cfg: DictConfig, model: GaussianModel, shadow: ShadowWeights, renderer: Renderer, data: DataPipeline,
            view_opt: ViewCorrections, hooks: Sequence[Hook], scene_scale: float, max_steps: int,
            device: torch.device) -> None:
    """Load a checkpoint that :func:`read_checkpoint` passed: the model, shadow, renderer, data
    order, view corrections, RNGs and hooks restore theirs in place; ``state`` takes new optimizers
    and schedulers, the strategy state, step, training time, loss average and last metrics. Config
    changes other than those refused (more steps, hooks, writers) are reported and allowed."""
    _, compatible = config_changes(checkpoint["config"], OmegaConf.to_container(cfg, resolve=True))
    if compatible:
        info("resuming with changed settings: " + "; ".join(compatible))
    model.load_state_dict(checkpoint["gaussians"])
    shadow.restore(checkpoint, model.params)
    restore_renderer(renderer, checkpoint, path)
    optimizers = build_optimizers(model, cfg.optim, scene_scale)
    schedulers = build_schedulers(optimizers, cfg.optim, scene_scale, max_steps)
    for name, optimizer in optimizers.items():
        optimizer.load_state_dict(checkpoint["optimizers"][name])
    data.load_state_dict(checkpoint["data"])
    view_opt.load_state_dict(checkpoint.get("view_opt", {}), warn)
    saved_views, views = checkpoint.get("global_views"), data.views * data.world_size
    if saved_views is not None and saved_views != views:
        warn(f"the checkpoint trained on {saved_views} views per step over all ranks, this run on {views} "
             "(trainer.batch_size x optim.accumulate_steps x ranks): the view order continues differently")
    set_rng_states(checkpoint["rng"])
    state.loss_average.restore(_loss_average(checkpoint))
    step = int(checkpoint["step"])
    for scheduler in schedulers:
        scheduler.step(step)
    _restore_hooks(hooks, checkpoint.get("hooks", {}), path)
    info(f"resumed from {path} at step {step}")
    state.step, state.optimizers, state.schedulers = step, optimizers, schedulers
    state.strategy_state = _to_device(checkpoint["strategy_state"], device)
    state.stopwatch.restore(float(checkpoint.get("train_seconds", 0.0)))
    state.last_metrics = dict(checkpoint.get("last_metrics", {}))


def _restore_hooks(hooks: Sequence[Hook], states: Mapping[str, Any], path: Path) -> None:
    """Hand each hook its saved state (CheckpointError naming the hook when it does not fit)."""
    for hook in hooks:
        if hook.state_key in states:
            try:
                hook.load_state_dict(states[hook.state_key])
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
                raise CheckpointError(f"checkpoint '{path}': the state of hook {hook.state_key!r} does not fit "
                                      f"it ({type(err).__name__}: {err})") from None


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
