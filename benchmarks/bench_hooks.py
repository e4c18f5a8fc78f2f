"""Per-call cost of DefaultTrainer.call_hook with 10 registered hooks.

Prints nanoseconds per call for a point no hook overrides (target: under 2 us) and
for a point all 10 hooks override, with per-hook timing on (the default) and off.

    python benchmarks/bench_hooks.py
"""

from __future__ import annotations

import argparse
import timeit

from splattrain.engine.trainer import DefaultTrainer
from splattrain.hooks import Hook, HookDispatcher


class Counting(Hook):
    """Overrides one point and does almost nothing."""

    calls = 0

    def after_train_iter(self, trainer, step, batch, outputs):
        Counting.calls += 1


class Holder:
    """The attributes call_hook uses, without building a whole trainer."""

    call_hook = DefaultTrainer.call_hook

    def __init__(self, n_hooks: int, timing: bool) -> None:
        self.hooks = HookDispatcher(timing=timing)
        for i in range(n_hooks):
            self.hooks.register(Counting(priority=i))


def per_call_ns(stmt, number: int) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=5)) / number * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hooks", type=int, default=10)
    parser.add_argument("--number", type=int, default=200_000)
    args = parser.parse_args()
    print(f"call_hook with {args.hooks} registered hooks")
    for timing in (True, False):
        holder = Holder(args.hooks, timing)
        unused = per_call_ns(lambda: holder.call_hook("before_train_iter", 1, None), args.number)
        used = per_call_ns(lambda: holder.call_hook("after_train_iter", 1, None, None), args.number // 10)
        label = "on " if timing else "off"
        print(f"  per-hook timing {label}: point no hook overrides {unused:6.0f} ns (target < 2000 ns), "
              f"point all {args.hooks} override {used:6.0f} ns")


if __name__ == "__main__":
    main()
