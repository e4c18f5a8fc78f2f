"""The trainer's side of stop and snapshot signals: which signals the ranks agree on at each safe
point. What is saved is asked by hooks (``on_signal``) and done by the trainer.

:mod:`splattrain.interrupts` records the signals. On several ranks a signal that reached any rank
travels in the next step's gradient all-reduce (one slot per rank,
:meth:`DistContext.sync_gradients`), so every rank acts on it after the same step; after the last
step one small all-reduce agrees on those that came since. Between validation views only a single
process acts (the ranks score different views; theirs waits for the next agreement).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Optional, Tuple

from .. import interrupts
from ..distributed import DistContext

#: (the stop signal to act on or None, whether a snapshot was asked)
Signals = Tuple[Optional[int], bool]


def before_exchange(dist: DistContext) -> None:
    """Put this rank's signal (a stop signal, else SIGUSR1 if asked) in the step's gradient exchange."""
    if dist.enabled:
        dist.pending_signal = interrupts.take() or (interrupts.SNAPSHOT_SIGNAL if interrupts.take_snapshot() else 0)


def after_step(dist: DistContext) -> Signals:
    """The signals every rank agrees on at the safe point after a step's update."""
    if not dist.enabled:
        return interrupts.take(), interrupts.take_snapshot()
    received, dist.agreed_signals = dist.agreed_signals, []
    stops = [s for s in received if s in interrupts.STOP_SIGNALS]
    return max(stops, default=None), interrupts.SNAPSHOT_SIGNAL in received


def between_views(dist: DistContext) -> Signals:
    """The signals to act on between two validation views (a single process only)."""
    if dist.enabled:
        return None, False
    return interrupts.take(), interrupts.take_snapshot()


def after_last_step(dist: DistContext) -> Optional[int]:
    """A stop signal that reached any rank since the last agreement (after the last step, its
    validation and ``after_train``); snapshots asked then are dropped (the final checkpoint is one)."""
    stop = interrupts.take() or 0
    if dist.enabled:
        stop = dist.any_rank([stop])[0]
    interrupts.take_snapshot()
    return stop or None


def describe(signum: int, stop: bool, step: int, path: Optional[Path], finished: bool, resume_hint: str) -> Tuple[str, str]:
    """(level, message) telling what the run did on ``signum`` at ``step`` (``path``: the checkpoint
    saved or to resume from, None when none)."""
    name = signal.Signals(signum).name
    if not stop:
        if path:
            return "info", f"{name}: saved a snapshot at step {step} to {path}; training goes on"
        return "warning", f"{name} received: no AutoCheckpointHook saves snapshots in this run; training goes on"
    if finished:
        what = "received after the last step: the run stops before writing its results"
    elif path:
        what = f"received: saved a resumable checkpoint at step {step} to {path}"
    else:
        what = f"received: the run stops after step {step} without a checkpoint (no AutoCheckpointHook saves on {name})"
    return "warning", f"{name} {what}" + (f". Resume with: {resume_hint}" if path else "")
