"""Where a `splattrain fit` run's wall time goes outside its training steps, and how long the
short commands take.

    python benchmarks/bench_startup.py [--runs 3] [--skip-fit] [dotted.key=value ...]

Part 1 runs ``splattrain fit --config configs/demo.yaml`` (output in outputs/bench_startup/) in a
fresh interpreter ``--runs`` times, as the command line does, with the trainer's phases timed from
inside: interpreter start and exit, imports, scene load, build (model, renderer and its library,
optimizers, strategy, hooks), run directory and writers, training steps, validations,
checkpoint and PLY writes, and the rest (hooks, console, results). It prints the median of
each phase, wall and process CPU seconds (CPU time is steadier on a busy machine), and
wall minus train_seconds: the start-up and finish cost a user pays on every run.

Part 2 times ``splattrain --help``, ``splattrain list hooks``, ``splattrain eval`` and
``splattrain export`` on that run directory (wall seconds of the whole process, median).
The compiled library must be cached already (run any CPU training once).

``--compare-with DIR`` (a checkout of another version, e.g. ``git worktree add /tmp/old HEAD~3``)
runs every measurement for both versions, taking turns, so load from other processes hits
them alike; its compiled library is built first if needed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "outputs" / "bench_startup"

# Runs in the child interpreter: `splattrain fit` as commands/fit.py does it, each phase timed.
CHILD = r"""
import atexit, gc, json, sys, time
atexit.register(gc.freeze)  # as the command line does: no collection of the process's objects at exit
started = (time.perf_counter(), time.process_time())
phases = {}
def mark(name, since):
    now = (time.perf_counter(), time.process_time())
    wall, cpu = phases.get(name, (0.0, 0.0))
    phases[name] = (wall + now[0] - since[0], cpu + now[1] - since[1])
    return now

from pathlib import Path
import splattrain.engine.trainer as trainer_module
from splattrain.engine import load_config
from splattrain.console import Console
t = mark("import", started)

def timed(name, fn):
    def inner(*args, **kwargs):
        since = (time.perf_counter(), time.process_time())
        try:
            return fn(*args, **kwargs)
        finally:
            mark(name, since)
    return inner

trainer_module.load_scene = timed("load scene", trainer_module.load_scene)
import splattrain.hooks.checkpoint_hook as ckpt_module
ckpt_module.save_checkpoint_file = timed("checkpoint + ply", ckpt_module.save_checkpoint_file)
ckpt_module.write_ply = timed("checkpoint + ply", ckpt_module.write_ply)
cfg = load_config(Path(sys.argv[1]), sys.argv[2:])
t0 = (time.perf_counter(), time.process_time())
trainer = trainer_module.DefaultTrainer(cfg, console=Console(quiet=True), config_dir=Path(sys.argv[1]).parent)
mark("build", t0)
phases["build"] = tuple(b - l for b, l in zip(phases["build"], phases.get("load scene", (0.0, 0.0))))
import splattrain.engine.run_files as run_files
run_files.open_run_dir = timed("run dir + writers", run_files.open_run_dir)
trainer.validate = timed("validation", trainer.validate)
t1 = (time.perf_counter(), time.process_time())
results = trainer.train(overwrite=True)  # the runs share one output folder
mark("train()", t1)
end = mark("child total", started)
wall, cpu = phases.pop("train()")
phases["train steps"] = (trainer.train_seconds, float("nan"))
inside = sum(phases[k][0] for k in ("run dir + writers", "validation", "checkpoint + ply") if k in phases)
phases["rest of train()"] = (wall - inside - trainer.train_seconds, float("nan"))
print(json.dumps({"phases": phases, "results": {k: v for k, v in results.items() if k != "per_view"}}))
"""

ORDER = ("interpreter start + exit", "import", "load scene", "build", "run dir + writers", "train steps", "validation",
         "checkpoint + ply", "rest of train()")


def python(source: Optional[Path], code: str) -> List[str]:
    """A command running ``code`` with splattrain imported from ``source`` (None: this checkout)."""
    if source is None:
        return [sys.executable, "-c", code]
    prefix = ("import sys\nsys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in type(f).__module__]\n"
              f"sys.path.insert(0, {str(source)!r})\n")
    return [sys.executable, "-c", prefix + code]


def fit_once(overrides: List[str], source: Optional[Path] = None) -> Dict:
    from splattrain.cli import GOMP_SPINCOUNT

    os.environ.setdefault("GOMP_SPINCOUNT", GOMP_SPINCOUNT)  # the child trains as the command line would
    command = [*python(source, CHILD), str(REPO / "configs" / "demo.yaml"), f"output_dir={OUT}", *overrides]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    report = json.loads(done.stdout.strip().splitlines()[-1])
    phases = report["phases"]
    phases["interpreter start + exit"] = (wall - phases.pop("child total")[0], float("nan"))
    report["wall"] = wall
    return report


def command_seconds(args: List[str], source: Optional[Path]) -> Tuple[float, float]:
    """Wall and CPU (user + system) seconds of one ``splattrain ARGS`` process (the console
    script's entry point)."""
    code = f"import sys\nsys.argv = ['splattrain', *{args!r}]\nfrom splattrain.cli import main\nsys.exit(main())"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(python(source, code), cwd=REPO, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def print_fit(label: str, reports: List[Dict]) -> None:
    print(f"{label}: median of {len(reports)} runs")
    print(f"{'phase':>24} {'wall s':>8} {'cpu s':>8}")
    for name in ORDER:
        wall = statistics.median(r["phases"].get(name, (0.0, 0.0))[0] for r in reports)
        cpu = statistics.median(r["phases"].get(name, (0.0, 0.0))[1] for r in reports)
        print(f"{name:>24} {wall:8.2f} {cpu:8.2f}")
    walls = [r["wall"] for r in reports]
    trains = [r["phases"]["train steps"][0] for r in reports]
    print(f"{'wall':>24} {statistics.median(walls):8.2f}   (runs: {', '.join(f'{w:.1f}' for w in walls)})")
    print(f"{'wall - train steps':>24} {statistics.median(w - t for w, t in zip(walls, trains)):8.2f}   (target < 3 s)")
    last = reports[-1]["results"]
    print(f"results: psnr {last['psnr']:.2f} dB, {last['num_gaussians']} Gaussians, {last['steps']} steps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-fit", action="store_true", help="only part 2 (needs outputs/bench_startup)")
    parser.add_argument("--compare-with", type=Path, help="a checkout of another version, measured in turns")
    parser.add_argument("overrides", nargs="*", help="dotted.key=value config overrides for the fit")
    args = parser.parse_args()
    versions = {"this checkout": None}
    if args.compare_with is not None:
        versions[str(args.compare_with)] = args.compare_with.resolve()
    with open("/proc/loadavg") as f:
        print(f"load average at start: {f.read().split()[0]}")
    if not args.skip_fit:
        reports: Dict[str, List[Dict]] = {label: [] for label in versions}
        for _ in range(args.runs):
            for label, source in versions.items():
                reports[label].append(fit_once(args.overrides, source))
        for label in versions:
            print_fit(f"splattrain fit --config configs/demo.yaml {' '.join(args.overrides)} [{label}]", reports[label])
    argvs = (["--help"], ["list", "hooks"], ["eval", str(OUT)], ["export", str(OUT), "--format", "ply"])
    seconds: Dict[str, Dict[str, List[Tuple[float, float]]]] = {label: {str(a): [] for a in argvs} for label in versions}
    for _ in range(args.runs):
        for argv in argvs:
            for label, source in versions.items():
                seconds[label][str(argv)].append(command_seconds(argv, source))
    print(f"{'command':>40}" + "".join(f"{label[-20:]:>22}" for label in versions) + "   (wall s / cpu s, median)")
    for argv in argvs:
        name = "splattrain " + " ".join(Path(a).name if a.startswith("/") else a for a in argv)
        cells = []
        for label in versions:
            runs = seconds[label][str(argv)]
            wall, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            cells.append(f"{wall:.2f} / {cpu:.2f}")
        print(f"{name:>40}" + "".join(f"{cell:>22}" for cell in cells))

if __name__ == "__main__":
    main()
