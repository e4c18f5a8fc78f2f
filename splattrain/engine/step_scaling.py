"""Fit a config's step-valued settings to its run: ``trainer.schedule_steps`` and ``steps_scaler``.

``steps_scaler`` (as in gsplat) multiplies ``trainer.max_steps`` and every step-valued setting;
``schedule_steps`` says for which run length the step settings are written, so that they follow
``max_steps`` proportionally. Each component says which of its settings count steps where it
declares them (:mod:`splattrain.steps`): the schema's keys (``trainer.val_interval``,
``val_begin``, ``model.sh_degree_interval``, the start steps of ``trainer.resolution``), the
strategy's fields, the hooks' options and the step options of ``optim.schedules``; the
resolution section and the hooks' options are checked before anything is scaled. Scaling writes
the scaled values into the config and resets both knobs (1.0, null), so a saved config.yaml
describes exactly the run; it returns one line per changed setting for the run's header.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf, open_dict

from ..config.schema import ModelConfig, TrainerConfig
from ..config.values import MAX_STEPS
from ..errors import ConfigError
from ..hooks.specs import hook_sections
from ..optim.schedules import scale_schedule_steps
from ..registry import HOOKS, STRATEGIES
from ..steps import scale_count, step_kinds
from .resolution import check_resolution, scale_resolution_steps

Change = Tuple[str, Any, Any]


def run_factor(cfg: DictConfig) -> float:
    """The factor applied to ``Steps`` settings (1.0 when neither knob is set)."""
    scaler = float(cfg.trainer.steps_scaler)
    if scaler <= 0:
        raise ConfigError(f"key 'trainer.steps_scaler' must be > 0, got {scaler}")
    reference = cfg.trainer.schedule_steps
    if reference is not None and int(reference) <= 0:
        raise ConfigError(f"key 'trainer.schedule_steps' must be > 0 or null, got {reference}")
    return scaler * (int(cfg.trainer.max_steps) / int(reference) if reference else 1.0)


def scale_steps(cfg: DictConfig, explicit: Sequence[str] = ()) -> List[str]:
    """Scale every step-valued setting of ``cfg`` in place, but those at the key paths in
    ``explicit`` (given on the command line), and reset the knobs; returns one line per changed
    setting (``"trainer.val_interval 300 (1500 scaled by 400/2000)"``)."""
    check_resolution(cfg.trainer.resolution)  # every value is checked before any is scaled
    run, window = run_factor(cfg), float(cfg.trainer.steps_scaler)
    how = _describe_factor(cfg)
    keep = _Explicit(explicit)
    changes: List[Change] = []
    # every hook checks its options here, whether the run is scaled or not and wherever they were
    # given (a file, a base, the command line); nothing is written yet
    hooks = _hook_changes(cfg, run, window, keep)
    if run != 1.0 or window != 1.0:
        with open_dict(cfg):
            for section, schema in (("trainer", TrainerConfig), ("model", ModelConfig)):
                for field in dataclasses.fields(schema):
                    if field.metadata.get("steps") == "steps" and not keep(f"{section}.{field.name}"):
                        _set(cfg[section], field.name, f"{section}.{field.name}", run, changes)
            changes += _scale_section(cfg, "optim.schedules", lambda s: scale_schedule_steps(s, run), keep)
            changes += _scale_section(cfg, "trainer.resolution", lambda s: scale_resolution_steps(s, run), keep)
            strategy = STRATEGIES.get(str(cfg.strategy.get("type", "default")))
            changes += _scale_section(cfg, "strategy", lambda s: strategy.scale_steps(s, run, window, "strategy"), keep)
            changes += _write_hook_changes(cfg, hooks)
            if not keep("trainer.max_steps"):
                cfg.trainer.max_steps = scale_count(int(cfg.trainer.max_steps), window)
    cfg.trainer.steps_scaler = 1.0
    cfg.trainer.schedule_steps = None
    if cfg.trainer.max_steps > MAX_STEPS:
        raise ConfigError(f"key 'trainer.max_steps' must be at most {MAX_STEPS} (after trainer.steps_scaler), "
                          f"got {cfg.trainer.max_steps}")
    check_strategy_steps(cfg)
    return [f"{key} {_show(new)} ({_show(old)} scaled by {how})" for key, old, new in changes]


class _Explicit:
    """Whether a key path was given on the command line (itself, or a section holding it)."""

    def __init__(self, keys: Sequence[str]) -> None:
        self.keys = list(keys)

    def __call__(self, key: str) -> bool:
        return any(key == given or key.startswith((given + ".", given + "[")) for given in self.keys)


def _describe_factor(cfg: DictConfig) -> str:
    parts = []
    if cfg.trainer.schedule_steps:
        parts.append(f"{cfg.trainer.max_steps}/{cfg.trainer.schedule_steps}")
    if float(cfg.trainer.steps_scaler) != 1.0:
        parts.append(f"steps_scaler {float(cfg.trainer.steps_scaler):g}")
    return " x ".join(parts)


def _show(value: Any) -> str:
    return str(list(value)) if isinstance(value, (list, tuple)) else str(value)


def _set(node: DictConfig, key: str, path: str, factor: float, changes: List[Change]) -> None:
    written = node[key]
    scaled = scale_count(written, factor)
    if scaled != written:
        node[key] = scaled
        changes.append((path, written, scaled))


def _scale_section(cfg: DictConfig, path: str, scale, keep: _Explicit) -> List[Change]:
    """Scale a plain copy of the section at ``path`` with ``scale`` (the explicit settings put
    back as they were) and write it back."""
    section = OmegaConf.to_container(OmegaConf.select(cfg, path), resolve=True)
    changes = []
    for key, old, new in scale(section):
        if keep(key):
            _put(section, key[len(path) + 1:], old)
        else:
            changes.append((key, old, new))
    if changes:
        node = OmegaConf.select(cfg, path)
        if dataclasses.is_dataclass(OmegaConf.get_type(node)):  # a typed section takes its values one by one
            for key, value in section.items():
                node[key] = value
        else:
            parent, key = path.rsplit(".", 1) if "." in path else ("", path)
            (OmegaConf.select(cfg, parent) if parent else cfg)[key] = section
    return changes


def _put(tree: Dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for name in parents:
        tree = tree[name]
    tree[last] = value


HookChanges = List[Tuple[str, str, List[Change]]]


def _hook_changes(cfg: DictConfig, run: float, window: float, keep: _Explicit) -> HookChanges:
    """``(name, key path, changes)`` of each hook whose options scaling changes (computed on plain
    copies: a hook refuses a malformed option here, before anything is scaled)."""
    default_hooks = OmegaConf.to_container(cfg.default_hooks, resolve=True)
    custom = [OmegaConf.to_container(spec, resolve=True) for spec in cfg.custom_hooks]
    found: HookChanges = []
    for name, spec, where in hook_sections(default_hooks, custom):
        options = {k: v for k, v in spec.items() if k not in ("type", "priority")}
        changes = [c for c in HOOKS.get(str(spec["type"])).scale_steps(options, run, window, where) if not keep(c[0])]
        if changes:
            found.append((name, where, changes))
    return found


def _write_hook_changes(cfg: DictConfig, hooks: HookChanges) -> List[Change]:
    """Write each hook's scaled options (a default hook's under ``default_hooks.<name>``)."""
    changes: List[Change] = []
    for name, where, found in hooks:
        changes += found
        changed = {key.rsplit(".", 1)[1]: new for key, _, new in found}
        if where.startswith("custom_hooks["):
            cfg.custom_hooks[int(where[len("custom_hooks["):-1])].update(changed)
        elif cfg.default_hooks.get(name) is None:
            cfg.default_hooks[name] = changed
        else:
            cfg.default_hooks[name].update(changed)
    return changes


def check_strategy_steps(cfg: DictConfig) -> None:
    """Refuse strategy periods (``*_every``) below 1 and step settings beyond ``MAX_STEPS``."""
    strategy = STRATEGIES.get(str(cfg.strategy.get("type", "default")))
    defaults = {f.name: f.default for f in dataclasses.fields(strategy)} if dataclasses.is_dataclass(strategy) else {}
    for name in step_kinds(strategy):
        value = cfg.strategy.get(name, defaults.get(name))
        if not isinstance(value, int) or isinstance(value, bool):
            continue  # the strategy's own checks name a value of the wrong type
        if name.endswith("_every") and value < 1:
            raise ConfigError(f"key 'strategy.{name}' must be >= 1 (a period in steps), got {value}")
        if value > MAX_STEPS:
            raise ConfigError(f"key 'strategy.{name}' must be at most {MAX_STEPS}, got {value}")


def late_events(events: Dict[str, List[int]], max_steps: int, tail: float = 0.05) -> Dict[str, List[int]]:
    """The events (name -> steps) that fall in the last ``tail`` of training."""
    start = max_steps * (1.0 - tail)
    return {name: [s for s in steps if s > start] for name, steps in events.items() if any(s > start for s in steps)}


def check_schedule(strategy: Any, max_steps: int, warn=None) -> None:
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
