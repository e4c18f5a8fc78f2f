"""Milliseconds per training step with and without the geometry regularisers.

    python benchmarks/bench_geometry_losses.py RUN_DIR|CKPT [--steps 60] [--renderer cpu]

A step is render + loss + backward on the Gaussians of a trained run's checkpoint, cycling
through its training views: the photometric loss alone (L1 + D-SSIM, no depth), then with
``depth_distortion``, with ``normal_consistency`` and with both (each adds its extra composited
channels and its own arithmetic). The settings take turns step by step in one process, so load
from other processes hits them alike; prints the median ms per step and the extra over the
photometric step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from splattrain.commands.snapshot import load_snapshot  # noqa: E402
from splattrain.losses import build_loss  # noqa: E402
from splattrain.render import build_renderer  # noqa: E402

SETTINGS = {
    "photometric": [],
    "+ depth_distortion": [{"type": "depth_distortion", "weight": 10.0}],
    "+ normal_consistency": [{"type": "normal_consistency", "weight": 0.05}],
    "+ both": [{"type": "depth_distortion", "weight": 10.0}, {"type": "normal_consistency", "weight": 0.05}],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--renderer", default="cpu")
    args = parser.parse_args()
    snapshot = load_snapshot(args.target, "cpu")
    model = snapshot.model
    for param in model.params.values():
        param.requires_grad_(True)
    data = snapshot.views("train")
    batches = list(data.test_batches())
    runs = {}
    for name, extra in SETTINGS.items():
        loss = build_loss({"terms": [{"type": "l1", "weight": 0.8}, {"type": "dssim", "weight": 0.2}, *extra]})
        renderer = build_renderer({"type": args.renderer}, torch.device("cpu"))
        renderer.extra_outputs = loss.needs_outputs
        runs[name] = (renderer, loss)
    times: Dict[str, List[float]] = {name: [] for name in runs}
    for step in range(args.steps + 5):
        batch = batches[step % len(batches)]
        for name, (renderer, loss) in runs.items():
            with renderer.training_threads():
                start = time.perf_counter()
                render = renderer.render(model, batch["camera"], snapshot.sh_degree, batch["background"],
                                         depth=loss.needs_depth)
                loss(render, batch, model)["loss"].backward()
                elapsed = time.perf_counter() - start
            for param in model.params.values():
                param.grad = None
            if step >= 5:  # warm-up steps left out
                times[name].append(elapsed * 1000)
    base = statistics.median(times["photometric"])
    print(f"{model.num_gaussians:,} Gaussians, {len(batches)} views of {batches[0]['camera'][0].width}x"
          f"{batches[0]['camera'][0].height}, renderer {args.renderer}, {args.steps} steps each, taking turns")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:22s} {median:7.2f} ms/step  (+{median - base:5.2f} ms, x{median / base:.2f})")


if __name__ == "__main__":
    main()
