"""Wall seconds a whole ``splattrain fit`` needs to reach given test PSNRs, from runs of several lengths.

    python benchmarks/bench_time_to_quality.py [--scene demo|cup|both] [--demo-steps 150 250 500 1000 2000]
        [--cup-steps 500 1000 2000] [--targets 25.5 30 33] [--cup-targets 25 26 27 28 29]
        [--cup-path DIR] [--compare-with CHECKOUT]
        [--opensplat BINARY [BINARY ...]] [--opensplat-downscales 0] [--opensplat-target 25.5]
        [dotted.key=value ...]

Each run is a fresh process (start-up, scene loading, validation and writing included) with only
``trainer.max_steps=N`` set on the scene's preset (``configs/demo.yaml``, ``configs/colmap.yaml``),
so every step setting follows the run length as a user gets it (docs/real_captures.md). Per run:
steps, wall seconds, CPU seconds, training seconds, test PSNR, Gaussians. Then, per target PSNR,
the shortest wall time among the runs that reached it: the time a user waits for that quality.

With ``--opensplat`` (one or more built OpenSplat CPU binaries), each build's 2000-step demo run
is timed and scored on the demo's test views by splattrain's renderer and metrics
(``opensplat_demo.py``), the programs taking turns twice: every build, then splattrain's shortest
run of the ladder above that reached ``--opensplat-target``. The ratio of the wall times is
printed per build and turn, with the build's own PSNR beside it.

``--cup-path DIR`` trains another COLMAP scene with the cup's ladder (a held-out scene).
``--compare-with CHECKOUT`` (another version, e.g. ``git worktree add /tmp/old COMMIT``) runs every
ladder run with that version too, the two taking turns run by run (its own configs and code,
imported from the checkout), and prints its table, its time to each target and the ratio of the
two times.

Quote figures from a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import opensplat_demo

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "outputs" / "bench_time_to_quality"
SCENES = {
    "demo": (REPO / "configs" / "demo.yaml", []),
    "cup": (REPO / "configs" / "colmap.yaml", [f"data.path={REPO.parent / 'shared' / 'scenes' / 'cup'}"]),
}


def fit(scene: str, steps: int, extra: Sequence[str], source: Optional[Path] = None) -> Dict[str, float]:
    """One whole ``fit`` of ``scene`` for ``steps`` steps (with the checkout ``source``, None: this
    one); its wall time and results."""
    config, scene_args = SCENES[scene]
    root = source or REPO
    out = OUT / ("" if source is None else "other") / f"{scene}_{steps}"
    shutil.rmtree(out, ignore_errors=True)  # this benchmark's own runs, replaced each time
    command = [sys.executable, "-m", "splattrain", "fit", "--config", str(root / config.relative_to(REPO)),
               f"output_dir={out}", f"trainer.max_steps={steps}", "writers=[]", "metrics.lpips=false", *scene_args,
               *extra]
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cpu_before = children_cpu_seconds()
    started = time.perf_counter()
    subprocess.run(command, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    results = json.loads((out / "results.json").read_text())
    return {"steps": steps, "wall": wall, "cpu": children_cpu_seconds() - cpu_before, "train": results["train_seconds"],
            "psnr": results["psnr"], "gaussians": results["num_gaussians"]}


def children_cpu_seconds() -> float:
    """User and system seconds of the finished child processes so far: a run's CPU time tells a
    slower host (more CPU seconds) from a run kept waiting (the same CPU seconds, more wall)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_to(targets: Sequence[float], runs: List[Dict[str, float]]) -> Dict[float, Optional[Dict[str, float]]]:
    """Per target PSNR, the run of least wall time that reached it (None: no run did)."""
    best: Dict[float, Optional[Dict[str, float]]] = {}
    for target in targets:
        reached = [run for run in runs if run["psnr"] >= target]
        best[target] = min(reached, key=lambda run: run["wall"]) if reached else None
    return best


def ladder(scene: str, steps: Sequence[int], extra: Sequence[str], other: Optional[Path]):
    """Every run length of ``scene``, with the other checkout in turns when given."""
    ours: List[Dict[str, float]] = []
    theirs: List[Dict[str, float]] = []
    for count in steps:
        ours.append(fit(scene, count, extra))
        if other is not None:
            theirs.append(fit(scene, count, extra, other))
    return ours, theirs


def compare(scene: str, ours: List[Dict[str, float]], theirs: List[Dict[str, float]], targets: Sequence[float],
            other: Path) -> None:
    report(f"{scene} [{other}]", theirs, targets)
    ours_best, theirs_best = time_to(targets, ours), time_to(targets, theirs)
    print(f"{scene}: this checkout's time to each target over {other}'s")
    for target in targets:
        a, b = ours_best[target], theirs_best[target]
        ratio = f"{a['wall'] / b['wall']:.2f}" if a and b else "n/a (a target not reached)"
        print(f"  {target:5.1f} dB  {ratio}")


def report(scene: str, runs: List[Dict[str, float]], targets: Sequence[float]) -> None:
    print(f"\n{scene}: whole fit per run length (preset + trainer.max_steps only)")
    print(f"{'steps':>7} {'wall s':>8} {'cpu s':>8} {'train s':>8} {'PSNR dB':>8} {'Gaussians':>10}")
    for run in runs:
        print(f"{run['steps']:7d} {run['wall']:8.1f} {run['cpu']:8.1f} {run['train']:8.1f} {run['psnr']:8.2f} "
              f"{run['gaussians']:10,d}")
    print(f"{scene}: time to quality")
    for target, run in time_to(targets, runs).items():
        where = f"{run['wall']:6.1f} s  ({run['steps']} steps)" if run else "not reached by these runs"
        print(f"  {target:5.1f} dB  {where}")


def build_labels(binaries: Sequence[Path]) -> List[str]:
    """A distinct name for each binary: its file name, with as many parent folders as tell two
    builds of the same name apart (``upstream/build/opensplat``)."""
    for depth in range(1, max(len(binary.parts) for binary in binaries) + 1):
        labels = ["/".join(binary.parts[-depth:]) for binary in binaries]
        if len(set(labels)) == len(labels):
            return labels
    return [str(binary) for binary in binaries]


def opensplat_side_by_side(binaries: Sequence[Path], downscales: int, target: float, runs: List[Dict[str, float]],
                            extra: Sequence[str], turns: int = 2) -> None:
    """Every OpenSplat build's 2000-step demo run, then splattrain's shortest run to ``target``, in turns."""
    reached = time_to([target], runs)[target]
    if reached is None:
        print(f"\nno splattrain run above reached {target:.2f} dB: add longer --demo-steps")
        return
    out = OUT / "opensplat"
    shutil.rmtree(out, ignore_errors=True)  # this benchmark's own runs, replaced each time
    project = opensplat_demo.write_project(out / "project")
    steps = int(reached["steps"])
    print(f"\nOpenSplat {opensplat_demo.STEPS} steps (--num-downscales {downscales}) against splattrain's "
          f"{steps}-step run (the shortest above to {target:.2f} dB), in turns")
    labels = build_labels(binaries)
    ratios: Dict[str, List[float]] = {label: [] for label in labels}
    for turn in range(turns):
        walls = {}
        for index, (binary, label) in enumerate(zip(binaries, labels)):
            trained = out / f"build{index}_turn{turn}"
            trained.mkdir()
            walls[label] = opensplat_demo.train(binary, project, trained, downscales)
            scored = opensplat_demo.score(trained / "splat.ply")
            print(f"  {label}: {walls[label]:6.1f} s wall, {scored['psnr']:.2f} dB, "
                  f"SSIM {scored['ssim']:.4f}, {scored['gaussians']:,d} Gaussians")
        ours = fit("demo", steps, extra)
        print(f"  splattrain: {ours['wall']:6.1f} s wall, {ours['cpu']:.1f} s CPU ({steps} steps), {ours['psnr']:.2f} dB")
        for name, wall in walls.items():
            ratios[name].append(wall / ours["wall"])
    for name, values in ratios.items():
        print(f"ratio {name} wall / splattrain wall, per turn: {', '.join(f'{r:.1f}' for r in values)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scene", choices=["demo", "cup", "both"], default="both")
    parser.add_argument("--demo-steps", type=int, nargs="+", default=[150, 250, 500, 1000, 2000])
    parser.add_argument("--cup-steps", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--targets", type=float, nargs="+", default=[25.5, 30.0, 33.0])
    parser.add_argument("--cup-targets", type=float, nargs="+", default=[25.0, 26.0, 27.0, 28.0, 29.0])
    parser.add_argument("--cup-path", type=Path, help="another COLMAP scene trained with the cup's ladder")
    parser.add_argument("--compare-with", type=Path, metavar="CHECKOUT",
                        help="another version's checkout, every run taken in turns with it")
    parser.add_argument("--opensplat", type=Path, nargs="+", default=[], metavar="BINARY",
                        help="OpenSplat CPU builds to time side by side on the demo")
    parser.add_argument("--opensplat-downscales", type=int, default=0, help="OpenSplat's --num-downscales")
    parser.add_argument("--opensplat-target", type=float, default=25.5,
                        help="the test PSNR splattrain's side-by-side run must reach")
    args, extra = parser.parse_known_args()
    with open("/proc/loadavg") as f:
        print(f"load average at start {f.read().split()[0]}")
    other = args.compare_with.resolve() if args.compare_with else None
    if args.cup_path is not None:
        SCENES["cup"] = (SCENES["cup"][0], [f"data.path={args.cup_path.resolve()}"])
    if args.scene in ("demo", "both"):
        runs, theirs = ladder("demo", args.demo_steps, extra, other)
        report("demo", runs, args.targets)
        if other is not None:
            compare("demo", runs, theirs, args.targets, other)
        if args.opensplat:
            opensplat_side_by_side(args.opensplat, args.opensplat_downscales, args.opensplat_target, runs, extra)
    if args.scene in ("cup", "both"):
        runs, theirs = ladder("cup", args.cup_steps, extra, other)
        report("cup", runs, args.cup_targets)
        if other is not None:
            compare("cup", runs, theirs, args.cup_targets, other)
    with open("/proc/loadavg") as f:
        print(f"load average at end {f.read().split()[0]}")


if __name__ == "__main__":
    main()
