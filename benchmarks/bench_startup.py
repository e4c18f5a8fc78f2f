"""Where a `splattrain fit` run's wall time goes outside its training steps, and how long the
short commands take.

    python benchmarks/bench_startup.py [--runs 3] [--skip-fit] [dotted.key=value ...]

Part 1 runs ``splattrain fit --config configs/demo.yaml`` (output in outputs/bench_startup/) in a
fresh interpreter ``--runs`` times, as the command line does, with the trainer's phases timed from
inside: interpreter start, imports, scene load, build (model, renderer and its library,
optimizers, strategy, hooks), run directory and writers, training steps, validations,
checkpoint and PLY writes, and the rest (hooks, console, results). It prints the median of
each phase, wall and process CPU seconds (CPU time is steadier on a busy machine), and
wall minus train_seconds: the start-up and finish cost a user pays on every run.

Part 2 times ``splattrain --help``, ``splattrain list hooks``, ``splattrain eval`` and
``splattrain export`` on that run directory (wall seconds of the whole process, median).
The compiled library must be cached already (run any CPU training once).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "outputs" / "bench_startup"

# Runs in the child interpreter: `splattrain fit` as cli._fit does it, each phase timed.
CHILD = r"""
import json, sys, time
started = (time.perf_counter(), time.process_time())
phases = {}
def mark(name, since):
    now = (time.perf_counter(), time.process_time())
    wall, cpu = phases.get(name, (0.0, 0.0))
    phases[name] = (wall + now[0] - since[0], cpu + now[1] - since[1])
    return now

from pathlib import Path
import splattrain.engine.trainer as trainer_module
from splattrain.config import load_config
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
trainer._open_run_dir = timed("run dir + writers", trainer._open_run_dir)
trainer.validate = timed("validation", trainer.validate)
t1 = (time.perf_counter(), time.process_time())
results = trainer.train()
mark("train()", t1)
end = mark("child total", started)
wall, cpu = phases.pop("train()")
phases["train steps"] = (trainer.train_seconds, float("nan"))
inside = sum(phases[k][0] for k in ("run dir + writers", "validation", "checkpoint + ply") if k in phases)
phases["rest of train()"] = (wall - inside - trainer.train_seconds, float("nan"))
print(json.dumps({"phases": phases, "results": {k: v for k, v in results.items() if k != "per_view"}}))
"""

ORDER = ("interpreter start", "import", "load scene", "build", "run dir + writers", "train steps", "validation",
         "checkpoint + ply", "rest of train()")


def fit_once(overrides: List[str]) -> Dict:
    command = [sys.executable, "-c", CHILD, str(REPO / "configs" / "demo.yaml"), f"output_dir={OUT}", *overrides]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    report = json.loads(done.stdout.strip().splitlines()[-1])
    phases = report["phases"]
    phases["interpreter start"] = (wall - phases.pop("child total")[0], float("nan"))
    report["wall"] = wall
    return report


def command_seconds(args: List[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "splattrain", *args], cwd=REPO, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-fit", action="store_true", help="only part 2 (needs outputs/bench_startup)")
    parser.add_argument("overrides", nargs="*", help="dotted.key=value config overrides for the fit")
    args = parser.parse_args()
    with open("/proc/loadavg") as f:
        print(f"load average at start: {f.read().split()[0]}")
    if not args.skip_fit:
        reports = [fit_once(args.overrides) for _ in range(args.runs)]
        print(f"splattrain fit --config configs/demo.yaml {' '.join(args.overrides)}: median of {args.runs} runs")
        print(f"{'phase':>20} {'wall s':>8} {'cpu s':>8}")
        for name in ORDER:
            wall = statistics.median(r["phases"].get(name, (0.0, 0.0))[0] for r in reports)
            cpu = statistics.median(r["phases"].get(name, (0.0, 0.0))[1] for r in reports)
            print(f"{name:>20} {wall:8.2f} {cpu:8.2f}")
        walls = [r["wall"] for r in reports]
        trains = [r["phases"]["train steps"][0] for r in reports]
        print(f"{'wall':>20} {statistics.median(walls):8.2f}   (runs: {', '.join(f'{w:.1f}' for w in walls)})")
        print(f"{'wall - train steps':>20} {statistics.median(w - t for w, t in zip(walls, trains)):8.2f}   (target < 3 s)")
        last = reports[-1]["results"]
        print(f"results: psnr {last['psnr']:.2f} dB, {last['num_gaussians']} Gaussians, {last['steps']} steps")
    print(f"{'command':>36} {'wall s':>8}")
    for argv in (["--help"], ["list", "hooks"], ["eval", str(OUT)], ["export", str(OUT), "--format", "ply"]):
        print(f"{'splattrain ' + ' '.join(a if not a.startswith('/') else Path(a).name for a in argv):>36} "
              f"{command_seconds(argv, args.runs):8.2f}")


if __name__ == "__main__":
    main()
