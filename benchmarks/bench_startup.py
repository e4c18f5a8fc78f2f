"""What a `splattrain fit` costs beyond PyTorch's own import, where that time goes, and how long the
short commands take.

    python benchmarks/bench_startup.py [--runs 3] [--compare-with DIR] [--phases] [--commands]
        [dotted.key=value ...]

Part 1 (always): ``python -c "import torch"`` and a 1-step ``fit`` of the demo (``python -m
splattrain fit --config configs/demo.yaml trainer.max_steps=1 output_dir=...``, a fresh output
folder each time, output to a pipe) as whole processes, taking turns ``--runs`` times; prints each
one's wall seconds, the medians and the median of the fit minus the median of the import: the
start-up a user pays on top of PyTorch's (target: at most 0.5 s).

Part 2 (``--phases``): the same fit inside one interpreter (after ``import torch``), each phase
timed: imports, config, scene load, model (starting points and their neighbours), the rest of
the build (renderer and its library, strategy, optimizers, hooks), LPIPS, run folder and writers,
training steps, validation, checkpoint, the rest; median of ``--runs``.

Part 3 (``--commands``): ``splattrain --help``, ``list hooks``, ``eval`` and ``export`` of that
run (wall and CPU seconds of the whole process, median).

``--compare-with DIR`` (a checkout of another version, e.g. ``git worktree add /tmp/old HEAD~3``)
runs parts 1 and 3 for both versions, taking turns, so load from other processes hits them
alike. Each version first runs one fit that is not counted (its compiled library is built then if
needed). Quote figures from a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "outputs" / "bench_startup"

# Runs in the child interpreter: the fit as the command line runs it, each phase timed.
CHILD = r"""
import gc, json, sys, time
import torch
gc.freeze()  # as the command line does after importing PyTorch in a process of its own
phases = {}
def timed(module, name, phase):
    target = getattr(module, name, None)
    if target is None:
        return
    def inner(*args, **kwargs):
        since = time.perf_counter()
        try:
            return target(*args, **kwargs)
        finally:
            phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - since
    setattr(module, name, inner)
started = time.perf_counter()
import splattrain.cli, splattrain.commands.fit as fit_command, splattrain.engine.build as build
import splattrain.engine.trainer as trainer_module
phases["imports"] = time.perf_counter() - started
timed(fit_command, "load_run_config", "config")
timed(build, "load_scene", "scene load")
timed(build, "initial_model", "model")
timed(trainer_module, "build_components", "build")
Trainer = trainer_module.DefaultTrainer
timed(Trainer, "_evaluator", "LPIPS (evaluator)")
timed(Trainer, "_open_run_folder", "run folder + writers")
timed(Trainer, "train_step", "train steps")
timed(Trainer, "validate", "validation")
timed(Trainer, "save_checkpoint", "checkpoint")
timed(Trainer, "_run", "train()")
splattrain.cli.main(sys.argv[1:])
phases["total"] = time.perf_counter() - started
print(json.dumps(phases))
"""

PHASES = ("imports", "config", "scene load", "model", "build (rest)", "LPIPS (evaluator)", "run folder + writers",
          "train steps", "validation", "checkpoint", "rest")


def environment(source: Optional[Path]) -> Dict[str, str]:
    """The environment of a child running ``source`` (None: this checkout) first on the path, with
    bytecode caching on as in an installed copy: a shell's PYTHONDONTWRITEBYTECODE would have every
    run compile splattrain's own modules again (about 0.2 s), which no installed copy does."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(source or REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def timed_run(command: List[str], source: Optional[Path], cwd: Path) -> Tuple[float, float]:
    """Wall and CPU (user + system) seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=environment(source), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def fit_command(out: Path, overrides: List[str]) -> List[str]:
    return [sys.executable, "-m", "splattrain", "fit", "--config", "configs/demo.yaml", "trainer.max_steps=1",
            f"output_dir={out}", *overrides]


def part_one(versions: Dict[str, Optional[Path]], runs: int, overrides: List[str]) -> None:
    figures: Dict[str, Dict[str, List[float]]] = {label: {"torch": [], "fit": []} for label in versions}
    for _ in range(runs):
        for label, source in versions.items():
            cwd = source or REPO
            out = OUT / ("this" if source is None else "other")
            shutil.rmtree(out, ignore_errors=True)  # this benchmark's own runs, replaced each time
            figures[label]["torch"].append(timed_run([sys.executable, "-c", "import torch"], source, cwd)[0])
            figures[label]["fit"].append(timed_run(fit_command(out, overrides), source, cwd)[0])
    print(f"1-step fit of the demo against `python -c \"import torch\"`, {runs} turns (wall seconds)")
    for label, runs_of in figures.items():
        torch_median, fit_median = statistics.median(runs_of["torch"]), statistics.median(runs_of["fit"])
        print(f"  [{label}] import torch: {', '.join(f'{w:.2f}' for w in runs_of['torch'])} (median {torch_median:.2f}); "
              f"fit: {', '.join(f'{w:.2f}' for w in runs_of['fit'])} (median {fit_median:.2f}); "
              f"fit - import torch: {fit_median - torch_median:.2f} s (target <= 0.5)")


def part_two(runs: int, overrides: List[str]) -> None:
    reports = []
    for _ in range(runs):
        out = OUT / "phases"
        shutil.rmtree(out, ignore_errors=True)
        argv = ["fit", "--config", "configs/demo.yaml", "trainer.max_steps=1", f"output_dir={out}", *overrides]
        done = subprocess.run([sys.executable, "-c", CHILD, *argv], cwd=REPO, env=environment(None), check=True,
                              capture_output=True, text=True)
        phases = json.loads(done.stdout.strip().splitlines()[-1])
        phases["build (rest)"] = phases.get("build", 0.0) - phases.get("scene load", 0.0) - phases.get("model", 0.0)
        inside = sum(phases.get(k, 0.0) for k in ("LPIPS (evaluator)", "run folder + writers", "train steps",
                                                   "validation"))
        phases["rest"] = phases["total"] - phases["imports"] - phases.get("config", 0.0) - phases.get("build", 0.0) - inside
        reports.append(phases)
    print(f"\nthe 1-step fit inside one interpreter after `import torch`, median of {runs} (wall seconds)")
    for name in PHASES:
        print(f"  {name:>22} {statistics.median(r.get(name, 0.0) for r in reports):6.3f}")
    print(f"  {'total':>22} {statistics.median(r['total'] for r in reports):6.3f}   "
          "(checkpoint is inside train steps; rest: header, results, console, hook table)")


def part_three(versions: Dict[str, Optional[Path]], runs: int) -> None:
    run_dir = OUT / "this"
    if not (run_dir / "results.json").is_file():
        print("\nno run to evaluate: part 1 leaves one in outputs/bench_startup/this")
        return
    argvs = (["--help"], ["list", "hooks"], ["eval", str(run_dir)], ["export", str(run_dir), "--format", "ply"])
    seconds = {label: {str(a): [] for a in argvs} for label in versions}
    for _ in range(runs):
        for argv in argvs:
            for label, source in versions.items():
                seconds[label][str(argv)].append(timed_run([sys.executable, "-m", "splattrain", *argv], source,
                                                           source or REPO))
    print(f"\n{'command':>40}" + "".join(f"{label[-20:]:>22}" for label in versions) + "   (wall s / cpu s, median)")
    for argv in argvs:
        name = "splattrain " + " ".join(Path(a).name if a.startswith("/") else a for a in argv)
        cells = []
        for label in versions:
            measured = seconds[label][str(argv)]
            cells.append(f"{statistics.median(r[0] for r in measured):.2f} / {statistics.median(r[1] for r in measured):.2f}")
        print(f"{name:>40}" + "".join(f"{cell:>22}" for cell in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--compare-with", type=Path, help="a checkout of another version, measured in turns")
    parser.add_argument("--phases", action="store_true", help="also time the phases of the fit (this checkout)")
    parser.add_argument("--commands", action="store_true", help="also time the short commands")
    parser.add_argument("overrides", nargs="*", help="dotted.key=value config overrides for the fit")
    args = parser.parse_args()
    versions: Dict[str, Optional[Path]] = {"this checkout": None}
    if args.compare_with is not None:
        versions[str(args.compare_with)] = args.compare_with.resolve()
    with open("/proc/loadavg") as f:
        print(f"load average at start: {f.read().split()[0]}")
    for source in versions.values():  # a warm-up fit each: compiled libraries built, files in the page cache
        out = OUT / "warm-up"
        shutil.rmtree(out, ignore_errors=True)
        timed_run(fit_command(out, args.overrides), source, source or REPO)
    part_one(versions, args.runs, args.overrides)
    if args.phases:
        part_two(args.runs, args.overrides)
    if args.commands:
        part_three(versions, args.runs)
    with open("/proc/loadavg") as f:
        print(f"load average at end: {f.read().split()[0]}")


if __name__ == "__main__":
    main()
