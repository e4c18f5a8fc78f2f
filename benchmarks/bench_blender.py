"""Test PSNR along one whole run of a scene (NeRF-synthetic lego by default), and the time to given PSNRs.

    python benchmarks/bench_blender.py [--scene PATH [PATH ...]] [--steps 30000]
        [--ladder 1000 2000 3000 5000 7000 10000 15000 20000 25000] [--targets 30 33 35 35.78]
        [--views 8] [--stop-at STEP] [--resume] [--out DIR] [--preset auto|blender|colmap]
        [dotted.key=value ...]

Each scene (default ``../shared/scenes/lego``; more, e.g. another scene, by path) trains once with
the preset for its type (``configs/blender.yaml`` for Blender folders, ``configs/colmap.yaml``
otherwise) and ``trainer.max_steps=--steps`` alone, so the schedule follows the run as a user
gets it: lego at 30000 steps is the 3DGS paper's protocol (100 training views at full resolution
over white), published at 35.78 dB. At each ladder step the test PSNR of every ``--views``-th
test view is scored by this script (its time is left out of both clocks); the last step's figure
is the run's own final validation on every test view (PSNR, SSIM, LPIPS: null without weights).

Two clocks, each summed over the parts of the run: "train s", the training steps (densification
included; loading, validation and checkpoints left out), and "wall s", the run from reading its
config on (loading the scene, the preset's validations and checkpoints included, each part's own).
Per target PSNR: the first ladder step that reached it, with both times. "peak MiB": the
process's peak resident memory by that step (a run in parts: the part's own process).

A run may be done in parts: ``--stop-at STEP`` ends it after STEP with a checkpoint (so does
Ctrl-C), and ``--resume`` continues every scene from its newest checkpoint with the run's own exact
resume (the ladder so far travels in the checkpoint); a finished scene is reported as it stands.
Runs and their ``ladder.json`` go to ``--out`` (default outputs/bench_blender/<scene folder name>).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from splattrain import interrupts  # noqa: E402
from splattrain.config.schema import DataConfig  # noqa: E402
from splattrain.console import Console  # noqa: E402
from splattrain.data.loading import find_scene  # noqa: E402
from splattrain.engine import DefaultTrainer, load_config  # noqa: E402
from splattrain.errors import UserError  # noqa: E402
from splattrain.hooks.base import Hook  # noqa: E402
from splattrain.metrics import psnr  # noqa: E402

LEGO = REPO.parent / "shared" / "scenes" / "lego"
OUT = REPO / "outputs" / "bench_blender"
LADDER = [1000, 2000, 3000, 5000, 7000, 10000, 15000, 20000, 25000]
TARGETS = [30.0, 33.0, 35.0, 35.78]


class LadderHook(Hook):
    """Scores every ``views``-th test view at the ``ladder`` steps and keeps both clocks; its
    records and the wall time so far travel in the run's checkpoints."""

    priority = "LOWEST"

    def __init__(self, ladder: Sequence[int], views: int, stop_at: Optional[int], started: float, out: Path) -> None:
        super().__init__()
        self.ladder, self.views, self.stop_at, self.out = set(ladder), views, stop_at, out
        self.started = started  # when this part of the run began (perf_counter)
        self.earlier = 0.0  # the wall seconds of the earlier parts, as the resumed checkpoint holds them
        self.left_out = 0.0  # this part's seconds of the ladder's own scoring and the stop's validation
        self.records: List[Dict[str, Any]] = []
        self.finished = False
        self._stopping = False  # this part's stop is asked: its validation is not part of the run
        self._val_started: Optional[float] = None

    def wall(self) -> float:
        """The run's wall seconds so far, over every part, less what this benchmark adds."""
        return self.earlier + time.perf_counter() - self.started - self.left_out

    def state_dict(self) -> Dict[str, Any]:
        return {"records": [dict(r) for r in self.records], "wall": self.wall()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.records, self.earlier = [dict(r) for r in state["records"]], float(state["wall"])

    def after_train_iter(self, trainer, step: int, batch, outputs) -> None:
        if step in self.ladder and step < trainer.max_steps:
            started = time.perf_counter()
            with trainer.paused():  # left out of train_seconds
                score, count = self.score(trainer)
            self.left_out += time.perf_counter() - started
            self.add(trainer, step, score, count)
        if step == self.stop_at and step < trainer.max_steps:
            self._stopping = True
            trainer.request_stop(f"--stop-at {step}")

    def before_val(self, trainer) -> None:
        asked = self._stopping and not trainer.schedule.validates_at(trainer.step)
        self._val_started = time.perf_counter() if asked else None

    def after_val(self, trainer, metrics) -> None:
        if self._val_started is not None:  # the validation a stop asks: not part of the run
            self.left_out += time.perf_counter() - self._val_started

    def after_train(self, trainer) -> None:
        if trainer.step >= trainer.max_steps:
            metrics = trainer.last_metrics
            self.finished = True
            self.add(trainer, trainer.step, metrics.get("psnr"), len(trainer.data.test_frames),
                     ssim=metrics.get("ssim"), lpips=metrics.get("lpips"))

    def score(self, trainer) -> tuple:
        """The mean PSNR of every ``views``-th test view, and how many views that is."""
        import torch

        degree = trainer.schedule.sh_degree_at(trainer.step)
        values = []
        with torch.no_grad():
            for index, batch in enumerate(trainer.data.test_batches()):
                if index % self.views == 0:
                    render = trainer.renderer.render(trainer.model, batch["camera"], degree, trainer.background)
                    values.append(psnr(render.rgb, batch["image"]))
        return sum(values) / len(values), len(values)

    def add(self, trainer, step: int, score: Optional[float], views: int, **more: Any) -> None:
        self.records = [r for r in self.records if r["step"] < step]
        self.records.append({"step": step, "train_seconds": round(trainer.train_seconds, 3),
                             "wall_seconds": round(self.wall(), 3), "psnr": score, "views": views,
                             "gaussians": trainer.model.num_gaussians, "peak_rss_mib": peak_rss_mib(), **more})
        self.out.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"finished": self.finished, "ladder": self.records}, indent=2) + "\n"
        (self.out / "ladder.json").write_text(text)


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, MiB (a run in parts: its own part's)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def preset_for(scene: Path, preset: str) -> Path:
    """The preset file for ``scene`` (``auto``: blender for Blender folders, else colmap)."""
    if preset == "auto":
        preset = "blender" if find_scene(DataConfig(path=str(scene)), None)[0] == "blender" else "colmap"
    return REPO / "configs" / f"{preset}.yaml"


def run_scene(scene: Path, args: argparse.Namespace, extra: Sequence[str]) -> Dict[str, Any]:
    """Train (or go on training) one scene; its ladder as ladder.json holds it."""
    out = args.out / scene.name
    done = out / "ladder.json"
    if args.resume and done.is_file() and json.loads(done.read_text())["finished"]:
        return json.loads(done.read_text())
    if not args.resume:
        shutil.rmtree(out, ignore_errors=True)  # this benchmark's own run, replaced each time
    started = time.perf_counter()
    preset = preset_for(scene, args.preset)
    overrides = [f"data.path={scene.resolve()}", f"trainer.max_steps={args.steps}", f"output_dir={out}",
                 "writers=[]", *extra]
    cfg = load_config(preset, overrides)
    resume = shlex.join([sys.executable, *sys.argv, *([] if args.resume else ["--resume"])])
    trainer = DefaultTrainer(cfg, console=Console(quiet=True), resume_command=resume)
    hook = LadderHook([s for s in args.ladder if s < args.steps], args.views, args.stop_at, started, out)
    trainer.register_hook(hook)
    trainer.train(resume="latest" if args.resume and (out / "ckpt").is_dir() else None)
    return {"finished": hook.finished, "ladder": hook.records}


def report(name: str, run: Dict[str, Any], targets: Sequence[float]) -> None:
    print(f"\n{name}: test PSNR along the run")
    print(f"{'step':>7} {'train s':>9} {'wall s':>9} {'PSNR dB':>8} {'views':>6} {'Gaussians':>10} {'peak MiB':>9}")
    for r in run["ladder"]:
        shown = "null" if r["psnr"] is None else f"{r['psnr']:.2f}"
        print(f"{r['step']:7d} {r['train_seconds']:9.1f} {r['wall_seconds']:9.1f} {shown:>8} {r['views']:6d} "
              f"{r['gaussians']:10,d} {_shown(r.get('peak_rss_mib'), '.0f'):>9}")
    if run["finished"]:
        last = run["ladder"][-1]
        print(f"{name}: final, every test view: PSNR {_shown(last['psnr'], '.2f')}, SSIM {_shown(last['ssim'], '.4f')}, "
              f"LPIPS {_shown(last['lpips'], '.4f')}")
    else:
        print(f"{name}: stopped after step {run['ladder'][-1]['step'] if run['ladder'] else 0}; go on with --resume")
    print(f"{name}: time to quality (the first ladder step that reached it)")
    for target in targets:
        reached = next((r for r in run["ladder"] if r["psnr"] is not None and r["psnr"] >= target), None)
        where = (f"step {reached['step']}: {reached['train_seconds']:.1f} s training, {reached['wall_seconds']:.1f} s wall"
                 if reached else "not reached")
        print(f"  {target:6.2f} dB  {where}")


def _shown(value: Optional[float], fmt: str) -> str:
    return "null" if value is None or not math.isfinite(value) else format(value, fmt)


def parse_args(argv: Optional[Sequence[str]] = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scene", type=Path, nargs="+", default=[LEGO], help="scene folders (default: lego)")
    parser.add_argument("--steps", type=int, default=30000, help="trainer.max_steps of every run")
    parser.add_argument("--ladder", type=int, nargs="+", default=LADDER, help="the steps scored along the run")
    parser.add_argument("--targets", type=float, nargs="+", default=TARGETS, help="test PSNRs to time")
    parser.add_argument("--views", type=int, default=8, help="score every N-th test view along the run")
    parser.add_argument("--stop-at", type=int, help="end this part after this step, with a checkpoint")
    parser.add_argument("--resume", action="store_true", help="go on from each scene's newest checkpoint")
    parser.add_argument("--out", type=Path, default=OUT, help="where the runs go (one folder per scene)")
    parser.add_argument("--preset", choices=("auto", "blender", "colmap"), default="auto")
    args, extra = parser.parse_known_args(argv)
    bad = [a for a in extra if "=" not in a or a.startswith("-")]
    if bad:
        parser.error(f"unrecognized arguments: {' '.join(bad)} (splattrain's options are dotted.key=value)")
    if args.steps < 1 or args.views < 1 or min(args.ladder) < 1:
        parser.error("--steps, --views and the --ladder steps must be positive")
    missing = [str(s) for s in args.scene if not s.is_dir()]
    if missing:
        parser.error(f"--scene: no such folder: {', '.join(missing)}")
    return args, extra


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, extra = parse_args(argv)
    interrupts.defer()  # Ctrl-C: the run saves a checkpoint at the step it reached
    try:
        runs = [(scene, run_scene(scene, args, extra)) for scene in args.scene]
    except (UserError, interrupts.Interrupted) as stopped:
        print(f"error: {stopped}" if isinstance(stopped, UserError) else "stopped: go on with --resume",
              file=sys.stderr)
        return 2
    finally:
        interrupts.restore()
    for scene, run in runs:
        report(scene.name, run, args.targets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
