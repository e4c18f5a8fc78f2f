"""Longer runs on capture variants: test PSNR, Gaussians and time of configs/colmap.yaml at a ladder
of run lengths (2000 / 7000 / 28000 steps), one run per length, for each variant given.

    python benchmarks/bench_longer_runs.py [--scene PATH ...] [--dome] [--variants original half_orbit ...]
        [--processed N] [--steps 2000 7000 28000] [--size WIDTH] [--stop-at STEP] [--out DIR] [--config FILE]
        [dotted.key=value ...]

Each ``--scene`` (a COLMAP scene folder; default ``../shared/scenes/cup``) and, with ``--dome``, the
dome of ``splattrain.synthetic.large_scene`` (``--dome-views``, ``--dome-width``; written once into
``--out``) is turned into the capture variants of :mod:`splattrain.synthetic.capture_variants`
(written once into ``--out``; ``--size`` shrinks the photos first); ``--processed N`` adds a scene
``splattrain process`` makes of every N-th photo of each ``--scene`` (in capture order, numbers in
names compared as numbers; needs the ``process`` extra), scored on its every 8th photo as the
reader's default split picks them. Every variant then trains
with the preset and ``trainer.max_steps`` = each ``--steps`` value alone, so the schedule follows
the run as a user who trains longer gets it. The row of a run: test PSNR (every test view; the
variant's own test views), the training views' PSNR, Gaussians, "train s" (the steps) and "wall s"
(the run from reading its config on, summed over its parts), and the change of test PSNR from the
ladder's first length ("fall").

Runs are resumable in parts: ``--stop-at STEP`` ends every unfinished run after STEP steps with a
checkpoint (so does Ctrl-C); the next call goes on from each run's newest checkpoint, and a
finished run is reported from its results.json. Everything goes to ``--out`` (default
outputs/bench_longer_runs); ``--fresh`` starts the runs over.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from splattrain import interrupts  # noqa: E402
from splattrain.console import Console  # noqa: E402
from splattrain.engine import DefaultTrainer, load_config  # noqa: E402
from splattrain.errors import UserError  # noqa: E402
from splattrain.hooks.base import Hook  # noqa: E402
from splattrain.synthetic.capture_variants import VARIANTS, write_variants  # noqa: E402
from splattrain.synthetic.large_scene import generate_large_scene  # noqa: E402

CUP = REPO.parent / "shared" / "scenes" / "cup"
OUT = REPO / "outputs" / "bench_longer_runs"
STEPS = [2000, 7000, 28000]


class PartsHook(Hook):
    """Ends this part of the run after ``stop_at`` steps and keeps the wall time of the parts so far
    in the run's checkpoints."""

    priority = "LOWEST"

    def __init__(self, stop_at: Optional[int], started: float) -> None:
        super().__init__()
        self.stop_at, self.started, self.earlier = stop_at, started, 0.0

    def wall(self) -> float:
        return self.earlier + time.perf_counter() - self.started

    def state_dict(self) -> Dict[str, Any]:
        return {"wall": self.wall()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.earlier = float(state["wall"])

    def after_train_iter(self, trainer, step: int, batch, outputs) -> None:
        if step == self.stop_at and step < trainer.max_steps:
            trainer.request_stop(f"--stop-at {step}")


def scenes(args: argparse.Namespace) -> Dict[str, Path]:
    """The variants to train, by name (``<scene>/<variant>``), written into ``--out`` once."""
    sources = {scene.name: scene for scene in args.scene}
    if args.dome:
        dome = args.out / "sources" / "dome"
        if not (dome / "sparse" / "0").is_dir():
            generate_large_scene(dome, views=args.dome_views, width=args.dome_width,
                                 height=round(args.dome_width * 2 / 3), points=args.dome_points)
        sources["dome"] = dome
    found = {}
    for name, source in sources.items():
        folder = args.out / "variants" / name
        missing = [v for v in args.variants if not (folder / v / "variant.json").is_file()]
        if missing:
            write_variants(source, folder, missing, args.size)
        found.update({f"{name}/{v}": folder / v for v in args.variants})
    for scene in args.scene if args.processed else []:
        found[f"{scene.name}/processed_{args.processed}"] = processed_variant(scene, args.processed, args.out)
    return found


def capture_order(path: Path) -> list:
    """A photo's sort key: its name with each run of digits compared as a number (``2.jpg`` before ``10.jpg``)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def processed_variant(source: Path, every: int, out: Path) -> Path:
    """The scene ``splattrain process`` makes of every ``every``-th photo of ``source``, written once
    (with a ``variant.json`` whose overrides keep the reader's default split)."""
    folder = out / "variants" / source.name / f"processed_{every}"
    if (folder / "variant.json").is_file():
        return folder
    photos = sorted((p for p in (source / "images").iterdir() if p.is_file()), key=capture_order)[::every]
    staged = out / "sources" / f"{source.name}_every_{every}"
    staged.mkdir(parents=True, exist_ok=True)
    for photo in photos:
        shutil.copyfile(photo, staged / photo.name)
    subprocess.run([sys.executable, "-m", "splattrain", "process", str(staged), str(folder)], check=True,
                   stdout=subprocess.DEVNULL)
    doc = {"variant": f"processed_{every}", "source": source.name, "views": len(photos), "test_images": [],
           "overrides": []}
    (folder / "variant.json").write_text(json.dumps(doc, indent=1) + "\n")
    return folder


def run_length(name: str, folder: Path, steps: int, args: argparse.Namespace, extra: Sequence[str]) -> Dict[str, Any]:
    """Train (or go on training) one variant for ``steps`` steps; the row of its results."""
    out = args.out / "runs" / name / f"steps_{steps}"
    results = out / "results.json"
    if results.is_file():
        done = json.loads(results.read_text())
        if "stopped" not in done:
            return row(name, steps, done, json.loads((out / "wall.json").read_text())["wall"], True)
    started = time.perf_counter()
    variant = json.loads((folder / "variant.json").read_text())
    overrides = [f"data.path={folder.resolve()}", f"trainer.max_steps={steps}", f"output_dir={out}",
                 "writers=[]", *variant["overrides"], *extra]
    cfg = load_config(args.config, overrides)
    resume = shlex.join([sys.executable, *sys.argv])
    trainer = DefaultTrainer(cfg, console=Console(quiet=True), resume_command=resume)
    hook = PartsHook(args.stop_at, started)
    trainer.register_hook(hook)
    report = trainer.train(resume="latest" if (out / "ckpt").is_dir() and any((out / "ckpt").iterdir()) else None)
    finished = "stopped" not in report
    (out / "wall.json").write_text(json.dumps({"wall": round(hook.wall(), 3)}) + "\n")
    return row(name, steps, report, hook.wall(), finished)


def row(name: str, steps: int, report: Dict[str, Any], wall: float, finished: bool) -> Dict[str, Any]:
    return {"variant": name, "steps": steps, "reached": report["steps"], "finished": finished,
            "psnr": report.get("psnr"), "aligned_psnr": report.get("aligned_psnr"), "train_psnr": report.get("train_psnr"),
            "gaussians": report["num_gaussians"], "train_seconds": report["train_seconds"], "wall_seconds": wall}


def _shown(value: Optional[float], fmt: str) -> str:
    return "null" if value is None else format(value, fmt)


def print_ladder(rows: List[Dict[str, Any]]) -> None:
    """One table: a row per variant and run length, the fall from the variant's first length (and
    an ``aligned`` column, the test views' aligned PSNR, when the runs have ``metrics.align_poses``)."""
    aligned = any(r.get("aligned_psnr") is not None for r in rows)
    print(f"{'variant':<26} {'steps':>6} {'test PSNR':>9} {'fall':>6} " + (f"{'aligned':>8} " if aligned else "")
          + f"{'train PSNR':>10} {'Gaussians':>10} {'train s':>8} {'wall s':>8}")
    first: Dict[str, Optional[float]] = {}
    for r in rows:
        base = first.setdefault(r["variant"], r["psnr"] if r["finished"] else None)
        fall = r["psnr"] - base if r["finished"] and base is not None and r["psnr"] is not None else None
        steps = f"{r['steps']}" if r["finished"] else f"{r['reached']}/{r['steps']}"
        print(f"{r['variant']:<26} {steps:>6} {_shown(r['psnr'], '.2f'):>9} {_shown(fall, '+.2f'):>6} "
              + (f"{_shown(r.get('aligned_psnr'), '.2f'):>8} " if aligned else "")
              + f"{_shown(r['train_psnr'], '.2f'):>10} {r['gaussians']:10,d} {r['train_seconds']:8.1f} "
              f"{r['wall_seconds']:8.1f}")
    if not all(r["finished"] for r in rows):
        print("some runs stopped part way (--stop-at or Ctrl-C): run the same command again to go on")


def parse_args(argv: Optional[Sequence[str]] = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scene", type=Path, nargs="*", default=None, help="COLMAP scene folders (default: the cup)")
    parser.add_argument("--dome", action="store_true", help="also the dome of splattrain.synthetic.large_scene")
    parser.add_argument("--dome-views", type=int, default=64)
    parser.add_argument("--dome-width", type=int, default=600)
    parser.add_argument("--dome-points", type=int, default=100_000)
    parser.add_argument("--variants", nargs="*", choices=VARIANTS, default=list(VARIANTS),
                        help="the capture variants (none: only --processed's scene)")
    parser.add_argument("--steps", type=int, nargs="+", default=STEPS, help="the run lengths (trainer.max_steps)")
    parser.add_argument("--size", type=int, default=None, help="shrink the photos to this width first")
    parser.add_argument("--processed", type=int, metavar="N", help="also a scene `splattrain process` makes of "
                        "every N-th photo of each --scene")
    parser.add_argument("--stop-at", type=int, help="end every unfinished run after this step, with a checkpoint")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "colmap.yaml")
    parser.add_argument("--fresh", action="store_true", help="start the runs over (variants are kept)")
    args, extra = parser.parse_known_args(argv)
    bad = [a for a in extra if "=" not in a or a.startswith("-")]
    if bad:
        parser.error(f"unrecognized arguments: {' '.join(bad)} (splattrain's options are dotted.key=value)")
    if min(args.steps) < 1:
        parser.error("--steps: the run lengths must be positive")
    if args.processed is not None and args.processed < 1:
        parser.error("--processed: every N-th photo needs N >= 1")
    args.scene = [CUP] if args.scene is None and not args.dome else list(args.scene or [])
    missing = [str(s) for s in args.scene if not s.is_dir()]
    if missing:
        parser.error(f"--scene: no such folder: {', '.join(missing)}")
    return args, extra


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, extra = parse_args(argv)
    if args.fresh:
        shutil.rmtree(args.out / "runs", ignore_errors=True)
    interrupts.defer()  # Ctrl-C: the run saves a checkpoint at the step it reached
    rows: List[Dict[str, Any]] = []
    try:
        for name, folder in scenes(args).items():
            rows += [run_length(name, folder, steps, args, extra) for steps in sorted(args.steps)]
    except (UserError, interrupts.Interrupted) as stopped:
        print(f"error: {stopped}" if isinstance(stopped, UserError) else "stopped: run it again to go on",
              file=sys.stderr)
        return 2
    finally:
        interrupts.restore()
    print_ladder(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
