"""Fit every step-valued setting to the run: ``trainer.steps_scaler`` and ``trainer.schedule_steps``.

``steps_scaler`` (as in gsplat) multiplies ``trainer.max_steps`` and every step-valued setting;
``schedule_steps`` says for which run length the step settings are written, so that they follow
``max_steps`` proportionally. Step-valued settings: the strategy's ``step_options`` (a class
attribute of every :class:`~splattrain.Strategy`, user strategies included; its
``window_options``, such as ``refine_every``, are how many steps of statistics a decision
reads: ``steps_scaler`` scales them, ``schedule_steps`` does not),
``model.sh_degree_interval``, ``trainer.val_interval`` / ``val_begin`` and the step options of
``optim.schedules`` (``milestones``, ``step_size``, ``periods``, ``warmup_steps``).
The scaled values are written into the config and both knobs reset (1.0, null), so a saved
config.yaml describes exactly the run.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional

from omegaconf import DictConfig, open_dict

from ..errors import ConfigError

_SCHEDULE_KEYS = ("milestones", "step_size", "periods", "warmup_steps")


def _scale(value: Any, factor: float) -> Any:
    """A step count (or list of them) times ``factor``; a positive count stays at least 1."""
    if isinstance(value, (list, tuple)) or hasattr(value, "__iter__") and not isinstance(value, str):
        return [_scale(v, factor) for v in value]
    if value is None or int(value) <= 0:
        return value
    return max(1, int(round(int(value) * factor)))


def step_factor(cfg: DictConfig) -> float:
    """The factor applied to step-valued settings (1.0 when neither knob is set)."""
    scaler = float(cfg.trainer.steps_scaler)
    if scaler <= 0:
        raise ConfigError(f"key 'trainer.steps_scaler' must be > 0, got {scaler}")
    reference = cfg.trainer.schedule_steps
    if reference is not None and int(reference) <= 0:
        raise ConfigError(f"key 'trainer.schedule_steps' must be > 0 or null, got {reference}")
    return scaler * (int(cfg.trainer.max_steps) / int(reference) if reference else 1.0)


def strategy_step_options(cfg: DictConfig, kind_of_option: str = "step_options") -> Dict[str, int]:
    """The strategy's step-valued options (``step_options``, or ``window_options``) with their
    values (config or class default)."""
    from ..registry import STRATEGIES

    kind = str(cfg.strategy.get("type", "default"))
    cls = STRATEGIES.get(kind)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    values = {}
    for name in getattr(cls, kind_of_option, ()):
        value = cfg.strategy.get(name, defaults.get(name))
        if value is not None and value is not dataclasses.MISSING:
            values[name] = int(value)
    return values


def apply_steps_scaling(cfg: DictConfig) -> float:
    """Scale the step-valued settings of ``cfg`` in place; returns the factor used (1.0: untouched)."""
    factor = step_factor(cfg)
    scaler = float(cfg.trainer.steps_scaler)
    if factor == 1.0 and scaler == 1.0:
        cfg.trainer.schedule_steps = None
        return 1.0
    with open_dict(cfg):
        for name, value in strategy_step_options(cfg).items():
            cfg.strategy[name] = _scale(value, factor)
        for name, value in strategy_step_options(cfg, "window_options").items():
            cfg.strategy[name] = _scale(value, scaler)  # a statistics window: not the run's length
        cfg.model.sh_degree_interval = _scale(cfg.model.sh_degree_interval, factor)
        cfg.trainer.val_interval = _scale(cfg.trainer.val_interval, factor)
        cfg.trainer.val_begin = _scale(cfg.trainer.val_begin, factor)
        for spec in cfg.optim.schedules.values():
            for key in _SCHEDULE_KEYS:
                if spec.get(key) is not None:
                    spec[key] = _scale(spec[key], factor)
        cfg.trainer.max_steps = _scale(cfg.trainer.max_steps, scaler)
    cfg.trainer.steps_scaler = 1.0
    cfg.trainer.schedule_steps = None
    return factor


def late_events(events: Dict[str, List[int]], max_steps: int, tail: float = 0.05) -> Dict[str, List[int]]:
    """The events (name -> steps) that fall in the last ``tail`` of training."""
    start = max_steps * (1.0 - tail)
    return {name: [s for s in steps if s > start] for name, steps in events.items() if any(s > start for s in steps)}


def check_schedule(strategy: Any, max_steps: int, warn: Optional[Callable[[str], None]] = None) -> None:
    """Refuse an opacity reset in the last 5% of training; warn (one line) when refinement runs
    there or never starts. ``strategy.events(max_steps)`` lists the steps of each kind of event."""
    events = strategy.events(max_steps)
    late = late_events(events, max_steps)
    fix = ("lower strategy.reset_every / strategy.refine_stop_iter, or set trainer.schedule_steps to the run "
           "length the step settings were written for (e.g. 30000) so they follow trainer.max_steps")
    if late.get("reset"):
        raise ConfigError(
            f"strategy: an opacity reset at step {late['reset'][-1]} of {max_steps} leaves no time to recover "
            f"(it falls in the last 5% of training); {fix}"
        )
    if warn is None:
        return
    if late.get("refine"):
        warn(f"strategy: refinement at step {late['refine'][-1]} of {max_steps} falls in the last 5% of training "
             "(new Gaussians get little training); " + fix)
    elif "refine" in events and not events["refine"]:
        warn(f"strategy: no refinement happens within {max_steps} steps (refine_start_iter is past the end)")
