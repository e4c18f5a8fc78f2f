"""What a run tells: the header it prints when it starts, the hook-timing table, and results.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional

import torch
from omegaconf import DictConfig
from rich.markup import escape

from .. import __version__
from ..console import Console
from ..data.pipeline import DataPipeline
from ..distributed import DistContext
from ..hooks.dispatch import HookDispatcher
from ..io.atomic import atomic_write_text
from ..losses import Loss
from ..model.gaussians import GaussianModel
from ..protocol import RunSchedule
from ..render.base import Renderer
from ..strategy.protocol import Strategy
from ..view_opt import ViewCorrections
from .resolution import ResolutionSchedule
from .run_state import RunState


def print_header(console: Console, cfg: DictConfig, gaussians: int, *, run_dir: Path, device: torch.device,
                 dist: DistContext, data: DataPipeline, data_type: str, renderer: Renderer, strategy: Strategy,
                 loss: Loss, schedule: RunSchedule, resolution: Optional[ResolutionSchedule],
                 hooks: HookDispatcher) -> None:
    """Scene, device, renderer, strategy, loss, Gaussians (``gaussians``: what the run starts from)
    and steps, each step setting the scaling changed; the hook table with --verbose."""
    camera = data.train_cameras[0]
    shown = str(device)
    if device.type == "cuda":
        shown += f" ({torch.cuda.get_device_name(device)})"
    console.info(
        f"[bold]splattrain {__version__}[/bold]  scene [bold]{escape(str(cfg.name))}[/bold]  "
        f"{data_type} {escape(str(cfg.data.path))}: {len(data.train_frames)} train / "
        f"{len(data.test_frames)} test{f' / {len(data.val_frames)} validation' if data.val_frames else ''} views, "
        f"{camera.width}x{camera.height}", markup=True,
    )
    for note in data.scene.extra.get("notes", []):
        console.info(note)
    console.info(
        f"device {shown}  renderer {type(renderer).__name__} ({renderer.rasterize_mode})  "
        f"gaussians {gaussians:,}  steps {schedule.max_steps:,}  run dir {run_dir}"
    )
    if dist.enabled:
        console.info(f"data-parallel: {dist.describe()}")
    terms = " + ".join(f"{term.weight:g} {name}" for name, term in loss.terms)
    console.info(f"strategy {type(strategy).__name__}  loss {terms}")
    if resolution is not None:
        console.info(f"coarse-to-fine (trainer.resolution): training views at {resolution.describe()}")
    kinds = {str(spec.get("type")) for spec in cfg.writers}
    if cfg.writers and not kinds & {"image", "ImageWriter"}:
        console.info("writers: no image writer, so validation images are not saved as PNGs (add {type: image} "
                     "to writers to keep them)")
    if schedule.scaled:
        console.info("step settings scaled to the run: " + "; ".join(schedule.scaled))
    rows = [[p, ", ".join(n)] for p, n in hooks.table()]
    console.table("hooks", ["point", "hooks (priority)"], rows, terminal=console.verbose)


def print_hook_timing(console: Console, hooks: HookDispatcher, train_seconds: float) -> None:
    """The time spent in each hook at each point, as a table (``trainer.hook_timing: summary``, or
    ``auto`` when hooks took a noticeable share of the ``train_seconds`` of the steps)."""
    if not hooks.timing_report_due(train_seconds):
        return
    rows = hooks.timing_rows(train_seconds)
    total = sum(hooks.seconds.values())
    share = 100.0 * total / train_seconds if train_seconds > 0 else 0.0
    console.table(
        f"time in hooks: {total:.3f} s, {share:.2f}% of {train_seconds:.1f} s of training",
        ["hook", "point", "calls", "total s", "ms/call", "% of training"],
        rows,
    )


def results(state: RunState, data: DataPipeline, model: GaussianModel, view_opt: ViewCorrections) -> Dict[str, Any]:
    """The last validation's metrics (psnr, cc_psnr, ssim, lpips, and aligned_psnr with
    ``metrics.align_poses``: the test views'), beside them
    ``train_psnr`` (training views) and ``val_psnr`` / ``val_ssim`` / ``val_lpips`` (the
    ``val_views`` views ``data.val_split`` held out; 0 of them: the test views' scores), Gaussians,
    steps, training time, per-view scores (test views), what the view corrections learned (when
    on), and ``stopped: {step, reason}`` when a hook ended the run early."""
    metrics = state.last_metrics
    report = {
        "psnr": metrics.get("psnr"),
        "cc_psnr": metrics.get("cc_psnr"),
        "ssim": metrics.get("ssim"),
        "lpips": metrics.get("lpips"),
        **({"aligned_psnr": metrics["aligned_psnr"]} if "aligned_psnr" in metrics else {}),
        "train_psnr": metrics.get("train_psnr"),
        "val_psnr": metrics.get("val_psnr"),
        "val_ssim": metrics.get("val_ssim"),
        "val_lpips": metrics.get("val_lpips"),
        "val_views": len(data.val_frames),
        "num_gaussians": model.num_gaussians,
        "steps": state.step,
        "train_seconds": round(state.train_seconds, 3),
        **view_opt.report(),
        "per_view": state.val_per_view,
    }
    if state.stopped is not None:
        report["stopped"] = state.stopped
    return report


def write_results(report: Dict[str, Any], path: Path) -> None:
    """``results.json``, atomically."""
    atomic_write_text(path, json.dumps(report, indent=2) + "\n")
