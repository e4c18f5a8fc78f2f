"""A trainer's full state as a checkpoint, and restoring it to continue a run exactly."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Tuple

import torch
from omegaconf import OmegaConf

from .. import __version__
from ..checkpoint import (
    RESUME_KEYS, CheckpointError, config_changes, find_resume_checkpoint, load_checkpoint_file, require_keys,
)
from ..checkpoint_schema import check_resume, check_scene
from ..optim import build_optimizers, build_schedulers
from .setup import rng_states, set_rng_states

if TYPE_CHECKING:  # pragma: no cover
    from .trainer import DefaultTrainer


def checkpoint_state(trainer: "DefaultTrainer") -> Dict[str, Any]:
    """Everything needed to continue ``trainer``'s run (hooks' states keyed by ``state_key``)."""
    return {
        "version": __version__,
        "step": trainer.step,
        "config": OmegaConf.to_container(trainer.cfg, resolve=True),
        "sh_degree": trainer.model.sh_degree,
        "gaussians": trainer.model.state_dict(),
        "world_transform": trainer.data.world_transform.clone(),
        "data_type": trainer.data_type,  # the dataset reader (what data.type auto chose)
        "optimizers": {name: opt.state_dict() for name, opt in trainer.optimizers.items()},
        "strategy_state": trainer.strategy_state,
        "view_opt": trainer.view_opt.state_dict(),
        "data": trainer.data.state_dict(),
        "global_views": trainer.data.views * trainer.data.world_size,  # views per step over all ranks
        "rng": rng_states(),
        "train_seconds": trainer.train_seconds,
        "last_metrics": trainer.last_metrics,
        "hooks": {h.state_key: state for h in trainer.hooks.hooks if (state := h.state_dict())},
    }


def read_checkpoint(trainer: "DefaultTrainer", source: str | Path) -> Tuple[Path, Dict[str, Any]]:
    """Find and load ``source`` (a path, or ``"latest"`` in the run directory) and check that it can
    continue ``trainer``'s run; changes nothing (the run directory included).

    Refuses a checkpoint whose scene or model settings differ from the trainer's config,
    listing the differences.
    """
    if str(source) == "latest":
        path, checkpoint = find_resume_checkpoint(trainer.checkpoint_dir, trainer.console.warning)
    else:
        path, checkpoint = Path(source), load_checkpoint_file(source)
    if "optimizers" not in checkpoint:
        raise CheckpointError(f"'{path}' is a published checkpoint without training state; it cannot be resumed")
    require_keys(checkpoint, path, RESUME_KEYS, "resume a run")
    check_scene(checkpoint, path)
    incompatible, _ = config_changes(checkpoint["config"], OmegaConf.to_container(trainer.cfg, resolve=True))
    if incompatible:
        raise CheckpointError(f"cannot resume from '{path}', the config changes: " + "; ".join(incompatible))
    check_resume(checkpoint, path, trainer)
    return path, checkpoint


def restore_checkpoint(trainer: "DefaultTrainer", source: str | Path | Tuple[Path, Dict[str, Any]]) -> Dict[str, Any]:
    """Load ``source`` (a path, ``"latest"``, or what :func:`read_checkpoint` returned) into ``trainer``.

    Other config changes than those refused (more steps, hooks, writers) are reported and allowed.
    """
    path, checkpoint = source if isinstance(source, tuple) else read_checkpoint(trainer, source)
    _, compatible = config_changes(checkpoint["config"], OmegaConf.to_container(trainer.cfg, resolve=True))
    if compatible:
        trainer.console.info("resuming with changed settings: " + "; ".join(compatible))
    cfg = trainer.cfg
    trainer.model.load_state_dict(checkpoint["gaussians"])
    _restore_training_weights(trainer, checkpoint.get("hooks", {}))
    trainer.optimizers = build_optimizers(trainer.model, cfg.optim, trainer.scene_scale)
    trainer.schedulers = build_schedulers(trainer.optimizers, cfg.optim, trainer.scene_scale, trainer.max_steps)
    for name, optimizer in trainer.optimizers.items():
        optimizer.load_state_dict(checkpoint["optimizers"][name])
    trainer.strategy_state = _to_device(checkpoint["strategy_state"], trainer.device)
    trainer.data.load_state_dict(checkpoint["data"])
    trainer.view_opt.load_state_dict(checkpoint.get("view_opt", {}), trainer.console.warning)
    saved_views, views = checkpoint.get("global_views"), trainer.data.views * trainer.data.world_size
    if saved_views is not None and saved_views != views:
        trainer.console.warning(
            f"the checkpoint trained on {saved_views} views per step over all ranks, this run on {views} "
            "(trainer.batch_size x optim.accumulate_steps x ranks): the view order continues differently"
        )
    set_rng_states(checkpoint["rng"])
    trainer.step = int(checkpoint["step"])
    trainer.train_seconds = float(checkpoint.get("train_seconds", 0.0))
    trainer.last_metrics = dict(checkpoint.get("last_metrics", {}))
    for scheduler in trainer.schedulers:
        scheduler.step(trainer.step)
    states = checkpoint.get("hooks", {})
    for hook in trainer.hooks.hooks:
        if hook.state_key in states:
            try:
                hook.load_state_dict(states[hook.state_key])
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
                raise CheckpointError(f"checkpoint '{path}': the state of hook {hook.state_key!r} does not fit "
                                      f"it ({type(err).__name__}: {err})") from None
    trainer.console.info(f"resumed from {path} at step {trainer.step}")
    return checkpoint


def _restore_training_weights(trainer: "DefaultTrainer", states: Dict[str, Any]) -> None:
    """A checkpoint whose Gaussians are a hook's averages (EMAHook with ``export_average``) keeps the
    training weights in that hook's state; resumed without the hook, train from those weights."""
    present = {hook.state_key for hook in trainer.hooks.hooks} | {hook.name for hook in trainer.hooks.hooks}
    for key, state in states.items():
        if key in present or not isinstance(state, dict) or not isinstance(state.get("training"), dict):
            continue
        with torch.no_grad():
            for name, weights in state["training"].items():
                trainer.model.params[name].copy_(weights.to(trainer.model.params[name].device))
        trainer.console.warning(
            f"the checkpoint's Gaussians are the averages of hook {key!r}, which this run does not have: "
            "training goes on from the training weights it saved, and the averages are dropped"
        )


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    return value
