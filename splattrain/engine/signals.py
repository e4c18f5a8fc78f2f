"""The trainer's side of stop and snapshot signals: polled at safe points, agreed across ranks,
then handed to :class:`AutoCheckpointHook`, which decides what is saved.

:mod:`splattrain.interrupts` records the signals. On several ranks a signal that reached any rank
travels in the next step's gradient all-reduce (one slot per rank,
:meth:`DistContext.sync_gradients`), so every rank acts on it after the same step; after the last
step one small all-reduce agrees on those that came since. Between validation views only a single
process acts (the ranks score different views; theirs waits for the next agreement).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import List, Optional

from .. import interrupts
from ..hooks.auto_checkpoint import AutoCheckpointHook
from ..hooks.trainer_api import Trainer
from ..interrupts import RunInterrupted


def before_exchange(trainer: Trainer) -> None:
    """Put this rank's signal (a stop signal, else SIGUSR1 if asked) in the step's gradient exchange."""
    ctx = trainer.dist
    if ctx.enabled:
        ctx.pending_signal = interrupts.take() or (interrupts.SNAPSHOT_SIGNAL if interrupts.take_snapshot() else 0)


def after_step(trainer: Trainer) -> None:
    """The safe point after a step's update: act on the signals every rank agrees on."""
    ctx = trainer.dist
    if ctx.enabled:
        received, ctx.agreed_signals = ctx.agreed_signals, []
        stops = [s for s in received if s in interrupts.STOP_SIGNALS]
        _act(trainer, max(stops, default=None), interrupts.SNAPSHOT_SIGNAL in received)
    else:
        _act(trainer, interrupts.take(), interrupts.take_snapshot())


def between_views(trainer: Trainer) -> None:
    """The safe point between two validation views (a single process only)."""
    if not trainer.dist.enabled:
        _act(trainer, interrupts.take(), interrupts.take_snapshot())


def after_last_step(trainer: Trainer) -> None:
    """After the last step, its validation and ``after_train``: a stop signal that reached any rank
    since the last agreement stops every rank before the results are written."""
    stop = interrupts.take() or 0
    if trainer.dist.enabled:
        stop = trainer.dist.any_rank([stop])[0]
    interrupts.take_snapshot()  # the run's final checkpoint is its snapshot
    if stop:
        _act(trainer, stop, False, finished=True)


def _act(trainer: Trainer, stop: Optional[int], snapshot: bool, finished: bool = False) -> None:
    """Stop on ``stop`` (after the hook saved what it saves), else save a snapshot if asked."""
    if stop:
        name = signal.Signals(stop).name
        path = _save(trainer, stop, finished)
        if finished:
            what = "received after the last step: the run stops before writing its results"
        elif path:
            what = f"received: saved a resumable checkpoint at step {trainer.step} to {path}"
        else:
            what = (f"received: the run stops after step {trainer.step} without a checkpoint "
                    f"(no AutoCheckpointHook saves on {name})")
        trainer.console.warning(f"{name} {what}" + (f". Resume with: {trainer.resume_hint}" if path else ""))
        raise RunInterrupted(stop, path)
    if snapshot:
        name = signal.Signals(interrupts.SNAPSHOT_SIGNAL).name
        path = _save(trainer, interrupts.SNAPSHOT_SIGNAL, finished)
        if path:
            trainer.console.info(f"{name}: saved a snapshot at step {trainer.step} to {path}; training goes on")
        else:
            trainer.console.warning(f"{name} received: no AutoCheckpointHook saves snapshots in this run; "
                                    "training goes on")


def _save(trainer: Trainer, signum: int, finished: bool) -> Optional[Path]:
    for hook in checkpoint_hooks(trainer):
        path = hook.save_on_signal(trainer, signum, finished)
        if path is not None:
            return path
    return None


def checkpoint_hooks(trainer: Trainer) -> List[AutoCheckpointHook]:
    """The run's AutoCheckpointHooks (normally the default hook ``auto_checkpoint``)."""
    return [hook for hook in trainer.hooks.hooks if isinstance(hook, AutoCheckpointHook)]
