"""Data-parallel training on one machine: 1 rank x 2 threads against 2 ranks x 1 thread.

Trains the demo scene (configs/demo.yaml) for ``--steps`` steps with the same global batch
(``--views`` views per step: one rank renders them all, or each of two ranks renders its half)
and prints views per second (also of 1 rank x 1 thread, the work of both ranks on one core), the share of rank 0's step time spent in collectives (the
all-reduces, and waiting in them for the slower rank), and the bytes all-reduced per step
against the Gaussian count. The two-rank run is started with torchrun on 127.0.0.1 (gloo).

    python benchmarks/bench_distributed.py
    python benchmarks/bench_distributed.py --steps 300 --views 4   (a shorter run, 4 views per step)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[1]


def train(steps: int, views_per_rank: int, threads: int, out: str) -> Dict[str, Any]:
    """Train in this process (one rank, or one of torchrun's ranks); returns rank 0's figures."""
    import torch

    from splattrain.config import load_config
    from splattrain.console import Console
    from splattrain.engine.trainer import DefaultTrainer
    from splattrain.hooks import Hook

    class StepBytes(Hook):
        """Bytes all-reduced in each step, with the Gaussian count the step started with."""

        def __init__(self) -> None:
            super().__init__()
            self.rows: List[List[int]] = []
            self._before, self._count = 0, 0

        def before_train_iter(self, trainer, step, batch) -> None:
            self._before, self._count = trainer.dist.bytes_reduced, trainer.model.num_gaussians

        def after_train_iter(self, trainer, step, batch, outputs) -> None:
            self.rows.append([step, self._count, trainer.dist.bytes_reduced - self._before])

    torch.set_num_threads(threads)
    cfg = load_config(REPO / "configs" / "demo.yaml", [
        f"output_dir={out}", f"data.path={REPO / 'data' / 'demo'}", f"trainer.max_steps={steps}", "trainer.val_interval=0", "metrics.lpips=false",
        f"trainer.batch_size={views_per_rank}", f"trainer.dist_threads={threads}",
        "default_hooks.checkpoint.interval=0", "default_hooks.checkpoint.save_last=false",
        "default_hooks.logger.interval=100000",
    ])
    trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    probe = StepBytes()
    trainer.register_hook(probe)
    results = trainer.train()
    ctx = trainer.dist
    return {"ranks": ctx.world_size, "threads": torch.get_num_threads(), "steps": steps,
            "views_per_second": views_per_rank * ctx.world_size * steps / results["train_seconds"],
            "train_seconds": results["train_seconds"], "comm_seconds": ctx.comm_seconds,
            "comm_breakdown": dict(ctx.comm_breakdown),
            "bytes_reduced": ctx.bytes_reduced, "step_bytes": probe.rows, "psnr": results["psnr"],
            "gaussians": results["num_gaussians"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--views", type=int, default=2, help="views per step over all ranks (even)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:  # one of torchrun's ranks
        figures = train(args.steps, args.views // 2, 1, args.out)
        if int(os.environ.get("RANK", "0")) == 0:
            print("RESULT " + json.dumps(figures))
        return
    with tempfile.TemporaryDirectory() as tmp:
        single = train(args.steps, args.views, 2, str(Path(tmp) / "one"))
        serial = train(args.steps, args.views, 1, str(Path(tmp) / "serial"))  # the per-rank work, unsplit
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                   "127.0.0.1", "--master-port", "29561", str(Path(__file__).resolve()), "--worker",
                   "--steps", str(args.steps), "--views", str(args.views), "--out", str(Path(tmp) / "two")]
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
        output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
        double = json.loads(next(line for line in output.splitlines() if line.startswith("RESULT "))[7:])
    print(f"demo scene, {args.steps} steps, {args.views} views per step, "
          f"{os.cpu_count()} cores (compare runs taken on one quiet machine)")
    print(f"{'run':<22} {'views/s':>8} {'train s':>8} {'comm s':>7} {'comm %':>7} {'PSNR':>7} {'gaussians':>10}")
    for name, r in (("1 rank x 2 threads", single), ("1 rank x 1 thread", serial), ("2 ranks x 1 thread", double)):
        share = 100.0 * r["comm_seconds"] / r["train_seconds"] if r["train_seconds"] else 0.0
        print(f"{name:<22} {r['views_per_second']:>8.1f} {r['train_seconds']:>8.2f} {r['comm_seconds']:>7.2f} "
              f"{share:>6.1f}% {r['psnr']:>7.2f} {r['gaussians']:>10,}")
    ratio = double["views_per_second"] / single["views_per_second"]
    print(f"views per second, 2 ranks x 1 thread / 1 rank x 2 threads: {ratio:.2f}; "
          f"/ 1 rank x 1 thread: {double['views_per_second'] / serial['views_per_second']:.2f}")
    parts = double["comm_breakdown"]
    print(f"rank 0 communication per step (ms): " + ", ".join(
        f"{name} {1000.0 * seconds / args.steps:.2f}" for name, seconds in parts.items())
        + f"; step {1000.0 * double['train_seconds'] / args.steps:.2f}"
        + " (all_reduce includes waiting for the slower rank)")
    rows = double["step_bytes"]
    samples = [rows[0], rows[len(rows) // 2], rows[-1]]
    print("bytes all-reduced per step (rank 0): " + "; ".join(
        f"step {s}: {b:,} B for {n:,} Gaussians ({b / n:.0f} B each)" for s, n, b in samples))


if __name__ == "__main__":
    main()
