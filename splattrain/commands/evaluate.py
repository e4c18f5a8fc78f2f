"""``splattrain eval``: score a trained scene on its test (or train) views."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch
from omegaconf import OmegaConf

from .. import interrupts
from ..console import Console
from ..engine.run_folder import command_output
from ..io.atomic import atomic_write_text
from ..metrics import Evaluator, mean_metrics
from ..metrics.pose_alignment import aligned_psnr
from ..io.png import save_png
from .snapshot import load_snapshot


@torch.no_grad()
def evaluate(
    target: str | Path,
    console: Console,
    split: str = "test",
    out: Optional[str | Path] = None,
    save_renders: bool = False,
    device: str = "auto",
    lpips: Optional[bool] = None,
    imports: Sequence[str] = (),
    trust_config: bool = False,
    align_poses: Optional[int] = None,
) -> Dict[str, Any]:
    """Render every ``split`` view of the checkpoint at ``target``, score it, and write metrics.json
    (``imports`` / ``trust_config``: see :func:`~splattrain.commands.snapshot.load_snapshot`;
    ``align_poses``: as ``metrics.align_poses``, the run's own when None)."""
    snapshot = load_snapshot(target, device, imports, trust_config)
    folder = command_output(snapshot.run_dir, out, Path("eval") / f"step_{snapshot.step:06d}",
                            ["renders"] if save_renders else [])
    out_dir = folder.path
    cfg = snapshot.cfg
    evaluator = Evaluator(cfg.metrics.lpips if lpips is None else lpips, cfg.metrics.lpips_net, snapshot.device, console.warning,
                          OmegaConf.select(cfg, "metrics.lpips_weights", default=None),
                          bool(OmegaConf.select(cfg, "metrics.lpips_download", default=True)), console.transfer)
    scene = snapshot.scene()
    renderer = snapshot.renderer(log=console.info, warn=console.warning, scene=scene)
    pipeline = snapshot.views(split, scene)
    if align_poses is None:
        align_poses = int(OmegaConf.select(cfg, "metrics.align_poses", default=0) or 0)
    per_view: List[Dict[str, Any]] = []
    for batch in pipeline.test_batches():
        interrupts.check()
        result = renderer.render(snapshot.model, batch["camera"], snapshot.sh_degree, snapshot.background)
        name = batch["camera"][0].name
        per_view.append({"view": name, **evaluator(result.rgb, batch["image"])})
        if align_poses > 0:
            per_view[-1]["aligned_psnr"] = aligned_psnr(renderer, snapshot.model, batch, snapshot.sh_degree,
                                                        snapshot.background, align_poses)
        if save_renders:
            save_png(folder.file("renders", f"{name}.png"), result.rgb[0])
    report = {
        "checkpoint": str(snapshot.path),
        "step": snapshot.step,
        "split": split,
        **mean_metrics(per_view),
        "per_view": per_view,
    }
    atomic_write_text(folder.file("metrics.json"), json.dumps(report, indent=2) + "\n")
    aligned = ["aligned PSNR"] if align_poses > 0 else []
    rows = [[v["view"], f"{v['psnr']:.3f}", f"{v['ssim']:.4f}", _fmt(v["lpips"])] for v in per_view]
    rows.append(["mean", f"{report['psnr']:.3f}", f"{report['ssim']:.4f}", _fmt(report["lpips"])])
    if aligned:
        for row, view in zip(rows, [*per_view, report]):
            row.append(f"{view['aligned_psnr']:.3f}")
    console.table(f"{split} views of {snapshot.path} (step {snapshot.step})", ["view", "PSNR", "SSIM", "LPIPS", *aligned],
                  rows)
    console.info(f"wrote {out_dir / 'metrics.json'}")
    return report


def _fmt(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.4f}"
