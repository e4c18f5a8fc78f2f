"""Data-parallel training on one machine: 1 rank x 2 threads against 2 ranks x 1 thread, taking turns.

Trains the demo scene (configs/demo.yaml) for ``--steps`` steps three ways with the same global
batch (``--views`` views per step): 2 ranks x 1 thread (each rank renders its half), 1 rank x 2
threads and 1 rank x 1 thread (the work of both ranks on one core). Two processes are started with
torchrun on 127.0.0.1 (gloo); rank 0 holds all three trainers, which take turns ``--block`` steps
at a time through the same stretch of training, so that other load on a shared machine slows all
three alike (while a one-rank trainer runs, rank 1 waits in a barrier, using no CPU time). Each
trainer keeps its own random state, so it trains exactly as it would alone.

Prints views per second of each (from its step times, leaving out the first step of every turn),
the ratio of 2 ranks x 1 thread to 1 rank x 2 threads, and where the two-rank step's time goes:
render + loss + backward, the exchange (waiting for the slower rank, which renders another view;
the collective after both arrived; packing), and the rest (optimizer, strategy, hooks, data: work
every rank repeats), against the one-rank runs; gloo's own all-reduce of a few sizes on the two
ranks; and the bytes all-reduced per step against the Gaussian count.

    python benchmarks/bench_distributed.py
    python benchmarks/bench_distributed.py --steps 300 --views 4   (a shorter run, 4 views per step)
    python benchmarks/bench_distributed.py --from-step 1500 --steps 200 --block 25
        (steps 1501-1700 only: the last stretch, 20k Gaussians at SH degree 3; a checkpoint of
        one rank x 2 threads at step 1500, trained first and not timed, is where every run starts)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[1]
GLOO_SIZES_MB = (0.28, 2.4, 4.9)
DUAL, ONE_BUCKET = "2 ranks x 1 thread", "2 ranks x 1 thread, one bucket"
#: name -> (threads, two ranks, SH bands exchanged during the backward pass)
RUNS = {DUAL: (1, True, True), "1 rank x 2 threads": (2, False, False), "1 rank x 1 thread": (1, False, False),
        ONE_BUCKET: (1, True, False)}


class Turns:
    """Trainers of one process running one at a time, in rotation."""

    def __init__(self, names: List[str]) -> None:
        self.order = list(names)
        self.current = self.order[0]
        self.changed = threading.Condition()

    def wait(self, name: str) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.current == name)

    def pass_on(self, name: str, leave: bool = False) -> None:
        with self.changed:
            index = self.order.index(name)
            if leave:
                self.order.remove(name)
            if self.order:
                self.current = self.order[(index + (0 if leave else 1)) % len(self.order)]
            self.changed.notify_all()


def make_probe(name: str, threads: int, block: int, turns: Turns):
    """A hook that times every step of its trainer and takes turns with the others at block ends."""
    import torch.distributed as dist

    from splattrain.engine.setup import rng_states, set_rng_states
    from splattrain.kernels.threads import set_loop_threads
    from splattrain.hooks import Hook

    class Probe(Hook):
        priority = "LOWEST"  # the last hook at every point: its step time covers the others
        rank_consistent = True  # its after_backward only reads the clock

        def __init__(self) -> None:
            super().__init__()
            self.rows: List[List[Any]] = []
            self.rng: Dict[str, Any] = {}

        def _wait_turn(self, trainer) -> None:
            turns.wait(name)
            set_loop_threads(threads)  # the compiled library's loops; PyTorch's operations keep one thread
            set_rng_states(self.rng)
            if trainer.dist.enabled:
                dist.barrier()  # rank 1 waits here while rank 0's one-rank trainers run

        def before_run(self, trainer) -> None:
            self._wait_turn(trainer)  # the run's set-up and steps wait for this trainer's turn

        def before_train(self, trainer) -> None:
            self.first, self.started = True, time.perf_counter()

        def before_train_iter(self, trainer, step, batch) -> None:
            ctx = trainer.dist
            self.at = [trainer.model.num_gaussians, ctx.bytes_reduced, ctx.comm_seconds, time.perf_counter()]

        def after_backward(self, trainer, step, outputs) -> None:
            self.backward_done = [time.perf_counter(), trainer.dist.comm_seconds]

        def after_train_iter(self, trainer, step, batch, outputs) -> None:
            now, ctx = time.perf_counter(), trainer.dist
            count, sent, comm, began = self.at
            done, comm_done = self.backward_done
            self.rows.append([step, count, ctx.bytes_reduced - sent, now - self.started,
                              done - began - (comm_done - comm), ctx.comm_seconds - comm, self.first])
            self.first, self.started = False, now
            if step % block == 0 and step < trainer.max_steps:
                self.rng = rng_states()
                turns.pass_on(name)
                self._wait_turn(trainer)
                self.first, self.started = True, time.perf_counter()

        def after_train(self, trainer) -> None:
            turns.pass_on(name, leave=True)

    return Probe()


def build_trainer(name: str, steps: int, views: int, out: str, checkpoint_every: int = 0):
    """The demo-scene trainer of run ``name`` to step ``steps`` (a one-rank run does not join the
    process group)."""
    from splattrain.engine import load_config
    from splattrain.console import Console
    from splattrain.engine.trainer import DefaultTrainer

    threads, distributed, early = RUNS[name]
    cfg = load_config(REPO / "configs" / "demo.yaml", [
        f"output_dir={out}", f"data.path={REPO / 'data' / 'demo'}", f"trainer.max_steps={steps}", "trainer.val_interval=0",
        "metrics.lpips=false", f"trainer.batch_size={views // 2 if distributed else views}", f"trainer.dist_threads={threads}",
        f"default_hooks.checkpoint.interval={checkpoint_every}", "default_hooks.checkpoint.save_last=false",
        "default_hooks.logger.interval=100000", "default_hooks.auto_checkpoint=null",
        *([] if early else ["trainer.dist_early_bytes=-1"]),  # the whole exchange after the backward pass
    ])
    world = os.environ.get("WORLD_SIZE")
    if not distributed:
        os.environ["WORLD_SIZE"] = "1"
    try:
        trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    finally:
        if world is not None:
            os.environ["WORLD_SIZE"] = world
    return trainer


def gloo_all_reduce_ms(repeats: int = 20) -> Dict[str, float]:
    """Median milliseconds of one all-reduce of each size in GLOO_SIZES_MB on the process group."""
    import torch
    import torch.distributed as dist

    out = {}
    for megabytes in GLOO_SIZES_MB:
        buffer = torch.ones(int(megabytes * 1e6 / 4))
        times = []
        for _ in range(repeats):
            dist.barrier()
            started = time.perf_counter()
            dist.all_reduce(buffer)
            times.append(time.perf_counter() - started)
        out[f"{megabytes} MB"] = 1000.0 * statistics.median(times)
    return out


def worker(steps: int, views: int, block: int, out: str, start: int = 0) -> Dict[str, Any]:
    """One of torchrun's ranks: rank 0 trains every run in turns, rank 1 its half of the two-rank runs
    (from the checkpoint of step ``start`` in ``out`` when it is not 0)."""
    import torch.distributed

    from splattrain.engine.setup import rng_states

    rank = int(os.environ["RANK"])
    names = [name for name, (_, distributed, _) in RUNS.items() if rank == 0 or distributed]
    turns = Turns(names)
    trainers, probes, exchanges = {}, {}, {}
    for name in names:
        trainers[name] = build_trainer(name, start + steps, views, f"{out}/{name.replace(' ', '_').replace(',', '')}{rank}")
        probes[name] = make_probe(name, RUNS[name][0], block, turns)
        probes[name].rng = rng_states()  # the random state its construction left: it trains as if alone
        if RUNS[name][1]:
            exchanges[name] = time_exchanges(trainers[name].dist)
            trainers[name].dist.close = lambda: None  # the two-rank runs share the process group: left at the end
        trainers[name].register_hook(probes[name])
    gloo = gloo_all_reduce_ms()
    results: Dict[str, Any] = {}

    checkpoint = f"{out}/start/ckpt/step_{start:06d}.pt" if start else None

    def train(name: str) -> None:
        try:
            results[name] = trainers[name].train(resume=checkpoint)
        finally:  # a failed run leaves the rotation too (its error ends the benchmark)
            if name not in results:
                turns.pass_on(name, leave=True)

    threads = [threading.Thread(target=train, args=(name,), daemon=True) for name in names[1:]]
    for thread in threads:
        thread.start()
    train(names[0])  # in the main thread (signals)
    for thread in threads:
        thread.join()
    torch.distributed.destroy_process_group()
    return {"rank": rank, "gloo_ms": gloo, "exchanges": exchanges, "runs": {name: {
        "rows": probes[name].rows, "psnr": results[name]["psnr"], "gaussians": results[name]["num_gaussians"],
        "comm_breakdown": dict(trainers[name].dist.comm_breakdown), "early": trainers[name].dist.early.started,
        "views_per_step": views} for name in names}}


def time_exchanges(ctx) -> List[List[float]]:
    """When the rank enters and leaves each step's gradient exchange (``ctx.sync_gradients`` wrapped)."""
    times: List[List[float]] = []
    sync = ctx.sync_gradients

    def timed_sync(*args, **kwargs):
        entered = time.perf_counter()
        result = sync(*args, **kwargs)
        times.append([entered, time.perf_counter()])
        return result

    ctx.sync_gradients = timed_sync
    return times


def summary(run: Dict[str, Any], block: int) -> Dict[str, float]:
    """Mean milliseconds per step over the steps that did not start a turn (the step, render + loss +
    backward, the exchange, the rest) and views per second; also views per second from the median
    step of each block (less sensitive to other load on the machine than the mean)."""
    rows = [row for row in run["rows"] if not row[6]]
    step, render, comm = (1000.0 * statistics.fmean(row[i] for row in rows) for i in (3, 4, 5))
    turns: Dict[int, List[float]] = {}
    for row in rows:
        turns.setdefault((row[0] - 1) // block, []).append(row[3])
    median = 1000.0 * statistics.fmean(statistics.median(times) for times in turns.values())
    return {"step": step, "render": render, "comm": comm, "rest": step - render - comm,
            "views_per_second": 1000.0 * run["views_per_step"] / step,
            "median_views_per_second": 1000.0 * run["views_per_step"] / median}


def exchange_split(ranks: List[Dict[str, Any]], name: str) -> Dict[str, float]:
    """Rank 0's mean milliseconds per step in the exchange, waiting for the slower rank and after both
    arrived (a rank arrives when it enters the exchange after its backward pass; both ranks read the
    machine's one monotonic clock), over the steps that did not start a turn."""
    rows = ranks[0]["runs"][name]["rows"]
    wait, after = [], []
    for row, (enter0, leave0), (enter1, _) in zip(rows, ranks[0]["exchanges"][name], ranks[1]["exchanges"][name]):
        if not row[6]:
            arrived = max(enter0, enter1)
            wait.append(arrived - enter0)
            after.append(leave0 - arrived)
    return {"wait": 1000.0 * statistics.fmean(wait), "after": 1000.0 * statistics.fmean(after)}


def report(ranks: List[Dict[str, Any]], steps: int, views: int, block: int, start: int = 0) -> None:
    runs = ranks[0]["runs"]
    order = [DUAL, ONE_BUCKET, "1 rank x 2 threads", "1 rank x 1 thread"]
    figures = {name: summary(runs[name], block) for name in order}
    print(f"demo scene, steps {start + 1}-{start + steps}, {views} views per step, {os.cpu_count()} cores; the runs "
          f"alternate in blocks of {block} steps (the first step of each block is left out)")
    print(f"{'run (ms per step)':<32} {'views/s':>8} {'step':>7} {'render+bwd':>11} {'exchange':>9} {'rest':>6} "
          f"{'PSNR':>7} {'gaussians':>10}")
    for name, f in figures.items():
        print(f"{name:<32} {f['views_per_second']:>8.1f} {f['step']:>7.2f} {f['render']:>11.2f} {f['comm']:>9.2f} "
              f"{f['rest']:>6.2f} {runs[name]['psnr']:>7.2f} {runs[name]['gaussians']:>10,}")
    for key, what in (("views_per_second", "mean step"), ("median_views_per_second", "median step of each block")):
        rate = {name: f[key] for name, f in figures.items()}
        print(f"views per second ({what}), 2 ranks x 1 thread / 1 rank x 2 threads: "
              f"{rate[DUAL] / rate['1 rank x 2 threads']:.3f} (one bucket after the backward pass: "
              f"{rate[ONE_BUCKET] / rate['1 rank x 2 threads']:.3f}); / 1 rank x 1 thread: "
              f"{rate[DUAL] / rate['1 rank x 1 thread']:.2f}")
    for name in (DUAL, ONE_BUCKET):
        split = exchange_split(ranks, name)
        parts = runs[name]["comm_breakdown"]
        print(f"{name}, rank 0 exchange per step (ms): waiting for the slower rank {split['wait']:.2f}, after both "
              f"arrived {split['after']:.2f}; parts over all steps: " + ", ".join(
                  f"{part} {1000.0 * seconds / steps:.2f}" for part, seconds in parts.items())
              + f"; SH bands sent during the backward pass on {runs[name]['early']} of {steps} steps")
    print("gloo all-reduce alone on the two ranks (ms, median of 20): " + ", ".join(
        f"{size} {ms:.2f}" for size, ms in ranks[0]["gloo_ms"].items()))
    rows = runs[DUAL]["rows"]
    samples = [rows[0], rows[len(rows) // 2], rows[-1]]
    print("bytes all-reduced per step (rank 0): " + "; ".join(
        f"step {s}: {b:,} B for {n:,} Gaussians ({b / n:.0f} B each)" for s, n, b, *_ in samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--views", type=int, default=2, help="views per step over all ranks (even)")
    parser.add_argument("--block", type=int, default=50, help="steps per turn")
    parser.add_argument("--from-step", type=int, default=0,
                        help="first train one rank x 2 threads to this step (not timed), then time --steps from there")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:  # one of torchrun's ranks: writes its figures beside the run directories
        figures = worker(args.steps, args.views, args.block, args.out, args.from_step)
        Path(f"{args.out}/rank{figures['rank']}.json").write_text(json.dumps(figures))
        return
    with tempfile.TemporaryDirectory() as tmp:
        if args.from_step:  # the checkpoint every run resumes from
            build_trainer("1 rank x 2 threads", args.from_step, args.views, f"{tmp}/start", args.from_step).train()
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                   "127.0.0.1", "--master-port", "29561", str(Path(__file__).resolve()), "--worker",
                   "--steps", str(args.steps), "--views", str(args.views), "--block", str(args.block),
                   "--from-step", str(args.from_step), "--out", tmp]
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"the ranks failed:\n{done.stderr[-3000:]}")
        ranks = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(2)]
    report(ranks, args.steps, args.views, args.block, args.from_step)


if __name__ == "__main__":
    main()
