"""What a run tells: the header it prints when it starts, the hook-timing table, and results.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Protocol

import torch
from omegaconf import DictConfig
from rich.markup import escape

from .. import __version__
from ..console import Console
from ..data.pipeline import DataPipeline
from ..distributed import DistContext
from ..hooks.dispatch import HookDispatcher
from ..protocol import RunSchedule
from ..io.atomic import atomic_write_text
from ..losses import Loss
from ..model.gaussians import GaussianModel
from ..render.base import Renderer
from ..view_opt import ViewCorrections
from .resolution import ResolutionSchedule


class ReportedRun(Protocol):
    """What the report reads of a run (the :class:`~splattrain.engine.DefaultTrainer` has it)."""

    cfg: DictConfig
    console: Console
    device: torch.device
    run_dir: Path
    data: DataPipeline
    data_type: str
    model: GaussianModel
    renderer: Renderer
    strategy: Any
    loss: Loss
    schedule: RunSchedule
    dist: DistContext
    hooks: HookDispatcher
    view_opt: ViewCorrections
    step: int
    train_seconds: float
    last_metrics: Dict[str, Any]
    val_per_view: List[Dict[str, Any]]
    stopped: Optional[Dict[str, Any]]
    resolution: Optional[ResolutionSchedule]


def print_header(run: ReportedRun, gaussians: int) -> None:
    """Scene, device, renderer, strategy, loss, Gaussians (``gaussians``: what the run starts from)
    and steps, each step setting the scaling changed; the hook table with --verbose."""
    console, data, cfg = run.console, run.data, run.cfg
    camera = data.train_cameras[0]
    device = str(run.device)
    if run.device.type == "cuda":
        device += f" ({torch.cuda.get_device_name(run.device)})"
    console.info(
        f"[bold]splattrain {__version__}[/bold]  scene [bold]{escape(str(cfg.name))}[/bold]  "
        f"{run.data_type} {escape(str(cfg.data.path))}: {len(data.train_frames)} train / "
        f"{len(data.test_frames)} test{f' / {len(data.val_frames)} validation' if data.val_frames else ''} views, "
        f"{camera.width}x{camera.height}", markup=True,
    )
    for note in data.scene.extra.get("notes", []):
        console.info(note)
    console.info(
        f"device {device}  renderer {type(run.renderer).__name__} ({run.renderer.rasterize_mode})  "
        f"gaussians {gaussians:,}  steps {run.schedule.max_steps:,}  run dir {run.run_dir}"
    )
    if run.dist.enabled:
        console.info(f"data-parallel: {run.dist.describe()}")
    terms = " + ".join(f"{term.weight:g} {name}" for name, term in run.loss.terms)
    console.info(f"strategy {type(run.strategy).__name__}  loss {terms}")
    if run.resolution is not None:
        console.info(f"coarse-to-fine (trainer.resolution): training views at {run.resolution.describe()}")
    kinds = {str(spec.get("type")) for spec in run.cfg.writers}
    if run.cfg.writers and not kinds & {"image", "ImageWriter"}:
        console.info("writers: no image writer, so validation images are not saved as PNGs (add {type: image} "
                     "to writers to keep them)")
    if run.schedule.scaled:
        console.info("step settings scaled to the run: " + "; ".join(run.schedule.scaled))
    rows = [[p, ", ".join(n)] for p, n in run.hooks.table()]
    console.table("hooks", ["point", "hooks (priority)"], rows, terminal=console.verbose)


def print_hook_timing(run: ReportedRun) -> None:
    """The time spent in each hook at each point, as a table (``trainer.hook_timing: summary``, or
    ``auto`` when hooks took a noticeable share of the steps' time)."""
    hooks = run.hooks
    if not hooks.timing_report_due(run.train_seconds):
        return
    rows = hooks.timing_rows(run.train_seconds)
    total = sum(hooks.seconds.values())
    share = 100.0 * total / run.train_seconds if run.train_seconds > 0 else 0.0
    run.console.table(
        f"time in hooks: {total:.3f} s, {share:.2f}% of {run.train_seconds:.1f} s of training",
        ["hook", "point", "calls", "total s", "ms/call", "% of training"],
        rows,
    )


def results(run: ReportedRun) -> Dict[str, Any]:
    """The last validation's metrics (psnr, cc_psnr, ssim, lpips: the test views'), beside them
    ``train_psnr`` (training views) and ``val_psnr`` / ``val_ssim`` / ``val_lpips`` (the
    ``val_views`` views ``data.val_split`` held out; 0 of them: the test views' scores), Gaussians,
    steps, training time, per-view scores (test views), what the view corrections learned (when
    on), and ``stopped: {step, reason}`` when a hook ended the run early."""
    metrics = run.last_metrics
    report = {
        "psnr": metrics.get("psnr"),
        "cc_psnr": metrics.get("cc_psnr"),
        "ssim": metrics.get("ssim"),
        "lpips": metrics.get("lpips"),
        "train_psnr": metrics.get("train_psnr"),
        "val_psnr": metrics.get("val_psnr"),
        "val_ssim": metrics.get("val_ssim"),
        "val_lpips": metrics.get("val_lpips"),
        "val_views": len(run.data.val_frames),
        "num_gaussians": run.model.num_gaussians,
        "steps": run.step,
        "train_seconds": round(run.train_seconds, 3),
        **run.view_opt.report(),
        "per_view": run.val_per_view,
    }
    if run.stopped is not None:
        report["stopped"] = run.stopped
    return report


def write_results(report: Dict[str, Any], path: Path) -> None:
    """``results.json``, atomically."""
    atomic_write_text(path, json.dumps(report, indent=2) + "\n")
