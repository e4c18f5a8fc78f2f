"""Learning-rate and momentum schedules: stateless functions of the step.

A schedule gives, for ``t`` completed optimizer steps out of ``total``, a factor on a
parameter group's base learning rate (and, for ``cyclic`` and ``one-cycle``, Adam's beta1).
Being functions of the step alone, they need no state to resume exactly. The forms follow
MMCV's lr updaters and PyTorch's ``OneCycleLR``; see docs/optimisation.md for the formulas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError
from ..steps import scale_count

_COMMON = {"warmup_steps": 0, "warmup_ratio": 0.1}

#: Options of each schedule type and their defaults (``None``: no default).
OPTIONS: Dict[str, Dict[str, Any]] = {
    "fixed": {},
    "step": {"milestones": None, "step_size": None, "gamma": 0.1},
    "exp": {"gamma": None, "min_ratio": None, "stop_max": 0},
    "poly": {"power": 1.0, "min_ratio": 0.0},
    "inv": {"gamma": 1e-3, "power": 1.0},
    "cosine": {"min_ratio": 0.0},
    "flat-cosine": {"start_percent": 0.75, "min_ratio": 0.0},
    "cosine-restart": {"periods": None, "restart_weights": None, "min_ratio": 0.0},
    "cyclic": {
        "target_ratio": (10.0, 1e-4), "cyclic_times": 1, "step_ratio_up": 0.4, "anneal": "cos", "momentum": None,
    },
    "one-cycle": {
        "pct_start": 0.3, "div_factor": 25.0, "final_div_factor": 1e4, "anneal": "cos", "three_phase": False,
        "momentum": None,
    },
}


def anneal_cos(start: float, end: float, pct: float) -> float:
    """Cosine from ``start`` (pct 0) to ``end`` (pct 1)."""
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1.0)


def anneal_linear(start: float, end: float, pct: float) -> float:
    """Straight line from ``start`` (pct 0) to ``end`` (pct 1)."""
    return start + (end - start) * pct


_ANNEAL: Dict[str, Callable[[float, float, float], float]] = {"cos": anneal_cos, "linear": anneal_linear}

#: A phase: (first step, end step, start value, end value); values are annealed in between.
Phase = Tuple[float, float, float, float]


@dataclass(frozen=True)
class Schedule:
    """A schedule of ``type`` over ``total`` steps with its options (see :data:`OPTIONS`).

    :meth:`factor` is the learning rate at ``t`` completed steps divided by the base rate;
    :meth:`momentum` is beta1 (``None`` unless a cyclic / one-cycle schedule sets ``momentum``).
    """

    type: str
    total: int
    options: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.total < 1:
            raise ConfigError(f"a {self.type} schedule needs at least one step, got {self.total}")

    def factor(self, t: int) -> float:
        """Learning-rate factor for the step after ``t`` completed steps (linear warm-up included)."""
        t = min(max(t, 0), self.total)
        value = _FACTORS[self.type](self, t)
        warmup = self.options["warmup_steps"]
        if t < warmup:
            ratio = self.options["warmup_ratio"]
            value *= ratio + (1.0 - ratio) * t / warmup
        return value

    def momentum(self, t: int) -> Optional[float]:
        """Adam beta1 for the step after ``t`` completed steps, or None when not scheduled."""
        if self.options.get("momentum") is None:
            return None
        low, high = self.options["momentum"]
        # beta1 moves against the learning rate: high -> low while it rises, low -> high while it falls.
        phases = [(s, e, high if a < b else low, low if a < b else high) for s, e, a, b in self._phases()]
        if self.type == "one-cycle" and self.options["three_phase"]:
            phases[-1] = phases[-1][:2] + (high, high)
        return _in_phases(phases, self._phase_step(t), _ANNEAL[self.options["anneal"]])

    # -- the cyclic forms share their phases between lr and momentum --------------------------
    def _phase_step(self, t: int) -> float:
        t = min(max(t, 0), self.total)
        if self.type == "cyclic":
            return t % max(1, self.total // self.options["cyclic_times"])
        return min(t, self.total - 1)

    def _phases(self) -> List[Phase]:
        o = self.options
        if self.type == "cyclic":
            length = max(1, self.total // o["cyclic_times"])
            up = int(o["step_ratio_up"] * length)
            high, low = o["target_ratio"]
            return [(0, up, 1.0, high), (up, length, high, low)]
        peak, start = 1.0, 1.0 / o["div_factor"]
        end = start / o["final_div_factor"]
        rise = o["pct_start"] * self.total - 1
        if o["three_phase"]:
            return [(0, rise, start, peak), (rise, 2 * rise, peak, start), (2 * rise, self.total - 1, start, end)]
        return [(0, rise, start, peak), (rise, self.total - 1, peak, end)]


def _in_phases(phases: Sequence[Phase], t: float, anneal: Callable[[float, float, float], float]) -> float:
    """The annealed value at ``t`` in the first phase that ends after it (the last one beyond)."""
    for start, end, a, b in phases:
        if t < end:
            break
    return anneal(a, b, (t - start) / (end - start) if end > start else 1.0)


def _step(s: Schedule, t: int) -> float:
    o = s.options
    if o["milestones"] is not None:
        return o["gamma"] ** sum(t >= m for m in o["milestones"])
    return o["gamma"] ** (t // o["step_size"])


def _exp(s: Schedule, t: int) -> float:
    o = s.options
    if o["gamma"] is not None:
        return o["gamma"] ** t
    length = min(s.total, o["stop_max"]) if o["stop_max"] > 0 else s.total
    return o["min_ratio"] ** (min(t, length) / length)


def _poly(s: Schedule, t: int) -> float:
    m = s.options["min_ratio"]
    return (1.0 - m) * (1.0 - t / s.total) ** s.options["power"] + m


def _inv(s: Schedule, t: int) -> float:
    return (1.0 + s.options["gamma"] * t) ** (-s.options["power"])


def _cosine(s: Schedule, t: int) -> float:
    return anneal_cos(1.0, s.options["min_ratio"], t / s.total)


def _flat_cosine(s: Schedule, t: int) -> float:
    start = s.options["start_percent"] * s.total
    if t < start:
        return 1.0
    return anneal_cos(1.0, s.options["min_ratio"], (t - start) / (s.total - start))


def _cosine_restart(s: Schedule, t: int) -> float:
    o = s.options
    weights = o["restart_weights"] or [1.0] * len(o["periods"])
    begin = 0
    for period, weight in zip(o["periods"], weights):
        if t < begin + period:
            m = o["min_ratio"]
            return m + weight * (1.0 - m) * 0.5 * (math.cos(math.pi * (t - begin) / period) + 1.0)
        begin += period
    return o["min_ratio"]


def _cyclic(s: Schedule, t: int) -> float:
    return _in_phases(s._phases(), s._phase_step(t), _ANNEAL[s.options["anneal"]])


_FACTORS: Dict[str, Callable[[Schedule, int], float]] = {
    "fixed": lambda s, t: 1.0,
    "step": _step,
    "exp": _exp,
    "poly": _poly,
    "inv": _inv,
    "cosine": _cosine,
    "flat-cosine": _flat_cosine,
    "cosine-restart": _cosine_restart,
    "cyclic": _cyclic,
    "one-cycle": _cyclic,
}


def build_schedule(spec: Mapping[str, Any], total: int, where: str) -> Schedule:
    """A :class:`Schedule` from ``{type, **options}``; ``where`` names the config key in errors."""
    spec = dict(spec)
    kind = spec.pop("type", None)
    if kind not in OPTIONS:
        raise ConfigError(f"{where}.type: {kind!r} is not a schedule; use one of {', '.join(OPTIONS)}")
    known = {**_COMMON, **OPTIONS[kind]}
    unknown = sorted(set(spec) - set(known))
    if unknown:
        raise ConfigError(
            f"{where}: {', '.join(unknown)} not an option of a {kind} schedule (options: {', '.join(known)})"
        )
    options = {**known, **spec}
    _check(kind, options, where)
    return Schedule(kind, total, options)


def _check(kind: str, o: Dict[str, Any], where: str) -> None:
    """Refuse missing or contradictory options, naming the key."""

    def need(ok: bool, message: str) -> None:
        if not ok:
            raise ConfigError(f"{where}: {message}")

    need(o["warmup_steps"] >= 0 and 0.0 <= o["warmup_ratio"] <= 1.0,
         "warmup_steps must be >= 0 and warmup_ratio in [0, 1]")
    if kind == "step":
        need((o["milestones"] is None) != (o["step_size"] is None),
             "give either milestones (a list of steps) or step_size")
        need(o["step_size"] is None or o["step_size"] > 0, "step_size must be positive")
    if kind == "exp":
        need((o["gamma"] is None) != (o["min_ratio"] is None),
             "give either gamma (per step) or min_ratio (at the last step)")
        need(o["min_ratio"] is None or o["min_ratio"] > 0, "min_ratio must be positive")
        stop = o["stop_max"]
        need(isinstance(stop, int) and not isinstance(stop, bool) and stop >= 0, "stop_max must be a step count >= 0")
        need(stop == 0 or o["min_ratio"] is not None, "stop_max bounds the decay to min_ratio; give min_ratio, not gamma")
    if kind == "cosine-restart":
        need(bool(o["periods"]) and all(p > 0 for p in o["periods"]), "periods must be a list of positive step counts")
        weights = o["restart_weights"]
        need(weights is None or len(weights) == len(o["periods"]), "restart_weights needs one weight per period")
    if kind == "flat-cosine":
        need(0.0 <= o["start_percent"] < 1.0, "start_percent must be in [0, 1)")
    if kind in ("cyclic", "one-cycle"):
        need(o["anneal"] in _ANNEAL, f"anneal must be one of {', '.join(_ANNEAL)}")
        momentum = o["momentum"]
        need(momentum is None or (len(momentum) == 2 and 0.0 <= momentum[0] <= momentum[1] < 1.0),
             "momentum must be [low, high] beta1 values with 0 <= low <= high < 1")
    if kind == "cyclic":
        need(len(o["target_ratio"]) == 2 and o["cyclic_times"] >= 1,
             "target_ratio must be [high, low] and cyclic_times >= 1")
        need(0.0 < o["step_ratio_up"] < 1.0, "step_ratio_up must be in (0, 1)")
    if kind == "one-cycle":
        need(0.0 < o["pct_start"] < (0.5 if o["three_phase"] else 1.0),
             "pct_start must be in (0, 1) (three_phase: (0, 0.5))")


#: The options of a schedule that count steps (they follow the run's length; splattrain.steps). exp's
#: ``stop_max`` is a bound that holds however long the run, so it is not among them.
STEP_OPTIONS = ("milestones", "step_size", "periods", "warmup_steps")


def scale_schedule_steps(specs: Dict[str, Dict[str, Any]], factor: float, where: str = "optim.schedules") -> List[Tuple[str, Any, Any]]:
    """Scale the step-counting options of ``optim.schedules`` (group -> spec) in place; returns
    ``(key path, written, scaled)`` per change."""
    changes = []
    for group, spec in specs.items():
        for key in STEP_OPTIONS:
            if spec.get(key) is not None:
                scaled = scale_count(spec[key], factor)
                if scaled != spec[key]:
                    changes.append((f"{where}.{group}.{key}", spec[key], scaled))
                    spec[key] = scaled
    return changes
