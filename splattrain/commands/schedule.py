"""``splattrain schedule``: the learning rates, beta1, SH degree and strategy events a config will use, before training."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf
from PIL import Image, ImageDraw

from ..engine.step_scaling import check_schedule
from ..console import Console
from ..errors import ConfigError
from ..io.atomic import atomic_write_bytes
from ..model.gaussians import degree_for_step
from ..optim import GROUPS, build_schedules
from ..strategy import build_strategy

#: A named curve: its values at the steps it was sampled at.
Curve = Tuple[str, List[float]]
#: Most steps a plotted curve is sampled at (a run of any length plots in the same time).
PLOT_SAMPLES = 2000


def schedule_curves(cfg: DictConfig, steps: Optional[List[int]] = None) -> List[Curve]:
    """Learning rate of every scheduled group (means before its scene-scale factor), beta1 where
    scheduled, and the active SH degree, at ``steps`` (1-based; default every step up to
    :data:`PLOT_SAMPLES` steps spread evenly over the run)."""
    total = int(cfg.trainer.max_steps)
    if steps is None:
        count = min(total, PLOT_SAMPLES)
        steps = sorted({1 + round((total - 1) * i / max(1, count - 1)) for i in range(count)})
    curves: List[Curve] = []
    for name, schedule in build_schedules(cfg.optim, total).items():
        base = float(cfg.optim[f"{name}_lr"])
        label = f"{name} lr" + (" (x scene scale)" if name == "means" else "")
        curves.append((label, [base * schedule.factor(t - 1) for t in steps]))
        if schedule.momentum(0) is not None:
            curves.append((f"{name} beta1", [schedule.momentum(t - 1) for t in steps]))
    degree = [float(degree_for_step(s, cfg.model.sh_degree_interval, cfg.model.sh_degree)) for s in steps]
    curves.append(("SH degree", degree))
    return curves


def _sample_steps(cfg: DictConfig) -> List[int]:
    """Step 1, the last step, every tenth of the run, and where warm-ups and step drops end."""
    total = int(cfg.trainer.max_steps)
    steps = {1, total, *(max(1, round(total * k / 10)) for k in range(1, 10))}
    for spec in cfg.optim.schedules.values():
        steps.update(int(s) + 1 for s in spec.get("milestones") or [] if s < total)
        if spec.get("warmup_steps"):
            steps.add(min(total, int(spec["warmup_steps"]) + 1))
    return sorted(steps)


def schedule_table(cfg: DictConfig) -> Tuple[List[str], List[List[str]]]:
    """Columns and rows (the values at :func:`_sample_steps`) of the schedule report."""
    steps = _sample_steps(cfg)
    curves = schedule_curves(cfg, steps)
    rows = [[str(step)] + [f"{values[index]:.4g}" for _, values in curves] for index, step in enumerate(steps)]
    return ["step"] + [label for label, _ in curves], rows


def plot_schedules(curves: List[Curve], path: Path, total: int, width: int = 640, panel: int = 150) -> None:
    """One panel per curve (linear axes, min and max marked, steps 1..``total``), written as a PNG."""
    margin, gap = 70, 30
    image = Image.new("RGB", (width, gap + len(curves) * (panel + gap)), "white")
    draw = ImageDraw.Draw(image)
    for index, (label, values) in enumerate(curves):
        top = gap + index * (panel + gap)
        left, right, bottom = margin, width - 20, top + panel
        draw.rectangle([left, top, right, bottom], outline="black")
        draw.text((left, top - 16), label, fill="black")
        low, high = min(values), max(values)
        span = (high - low) or 1.0
        draw.text((4, top), f"{high:.3g}", fill="black")
        draw.text((4, bottom - 12), f"{low:.3g}", fill="black")
        draw.text((left, bottom + 2), "1", fill="black")
        draw.text((right - 40, bottom + 2), str(total), fill="black")
        stride = max(1, len(values) // (right - left))
        points = [
            (left + (right - left) * i / max(1, len(values) - 1), bottom - (panel - 8) * (v - low) / span - 4)
            for i, v in list(enumerate(values))[::stride] + [(len(values) - 1, values[-1])]
        ]
        draw.line(points, fill=(31, 119, 180), width=2)
    atomic_write_bytes(path, lambda handle: image.save(handle, format="PNG"))


def _describe_steps(steps: List[int]) -> str:
    if not steps:
        return "none"
    if len(steps) <= 6:
        return ", ".join(map(str, steps))
    return f"{len(steps)} steps: {steps[0]}, {steps[1]}, ... {steps[-1]}"


def strategy_lines(cfg: DictConfig) -> List[str]:
    """The strategy's events (refinement, opacity resets) over the run, and the verdict of the
    last-5% check (``ok``, a warning, or the refusal training would give)."""
    strategy = build_strategy(OmegaConf.to_container(cfg.strategy, resolve=True))
    total = int(cfg.trainer.max_steps)
    lines = [f"strategy {type(strategy).__name__} {name}: {_describe_steps(steps)}"
             for name, steps in strategy.events(total).items()]
    warnings: List[str] = []
    try:
        check_schedule(strategy, total, warnings.append)
    except ConfigError as err:
        warnings.append(f"training would refuse this config: {err}")
    return lines + (warnings or ["schedule check: no reset or refinement in the last 5% of training"])


def show_schedule(cfg: DictConfig, console: Console, out: Optional[str | Path] = None) -> None:
    """Print the schedule table (and the fixed groups); with ``out``, also plot every curve to a PNG."""
    columns, rows = schedule_table(cfg)
    console.table(f"schedules over {cfg.trainer.max_steps} steps (values used by each step)", columns, rows)
    fixed = [g for g in GROUPS if g not in cfg.optim.schedules and g != "means"]
    console.print("fixed: " + ", ".join(f"{g} {cfg.optim[f'{g}_lr']:.4g}" for g in fixed))
    for line in strategy_lines(cfg):
        console.print(line)
    if out is not None:
        plot_schedules(schedule_curves(cfg), Path(out), int(cfg.trainer.max_steps))
        console.print(f"plot -> {out}")
