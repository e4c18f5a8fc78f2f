"""Stop and snapshot signals: recorded here where they land, acted on at safe points.

This module is the only owner of signal handlers. A ``KeyboardInterrupt`` raised at an
arbitrary bytecode can land inside a library's import, inside a callback that C++ code made
(which then aborts the process) or inside a ``finally`` block that turns it into an unrelated
error. So the command line records SIGINT / SIGTERM (:func:`defer`) and long-running work polls
:func:`check` between units of work (images decoded, views rendered, requests served). Outside a
training run a second stop signal before the first was acted on stops at once.

While the trainer runs (:func:`during_run`) SIGUSR1, the *snapshot* signal, is recorded too, and
repeated stop signals are only recorded: the trainer polls :func:`take` and :func:`take_snapshot`
at its safe points (after each step, between validation views, after the last step), agrees on
them across ranks, and then tells ``AutoCheckpointHook`` what to save.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: The signal that asks a training run for a snapshot checkpoint; training goes on.
SNAPSHOT_SIGNAL = signal.SIGUSR1

_pending: Optional[int] = None
_snapshot = False
_escalate = True
_installed: Dict[int, Any] = {}


class Interrupted(KeyboardInterrupt):
    """The process was asked to stop by ``signum`` (SIGINT or SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class RunInterrupted(Interrupted):
    """A training run stopped on ``signum`` at a safe point; ``checkpoint`` is the checkpoint to
    resume from (None when none was saved). ``signum`` sets the exit code."""

    def __init__(self, signum: int, checkpoint: Optional[Path]) -> None:
        super().__init__(signum)
        name = signal.Signals(signum).name
        self.args = (f"{name}: checkpoint saved to {checkpoint}" if checkpoint else f"{name}: stopped",)
        self.checkpoint = checkpoint


def _record(signum: int, frame: object) -> None:
    global _pending, _snapshot
    if signum == SNAPSHOT_SIGNAL:
        _snapshot = True
        return
    if _pending is not None and _escalate:  # asked twice: stop where we are
        raise Interrupted(_pending)
    _pending = signum


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def defer() -> None:
    """Record SIGINT and SIGTERM from now on instead of raising where they land (main thread
    only; :func:`restore` puts the previous handlers back)."""
    if not _in_main_thread():
        return
    for signum in STOP_SIGNALS:
        previous = signal.signal(signum, _record)
        _installed.setdefault(signum, previous)


def restore() -> None:
    """The handlers from before :func:`defer`; forgets a pending signal."""
    global _pending, _snapshot
    for signum, handler in _installed.items():
        signal.signal(signum, handler)
    _installed.clear()
    _pending, _snapshot = None, False


@contextmanager
def during_run() -> Iterator[bool]:
    """Record the stop signals and SIGUSR1 while a training run goes on; a repeated stop signal
    is recorded, not raised (the trainer's next safe point is at most a step away). Yields False
    when signals cannot be handled here (not the main thread). Handlers this installs are put
    back afterwards, with what they recorded forgotten; under :func:`defer` a stop signal still
    pending is left to the command line."""
    global _escalate, _snapshot, _pending
    if not _in_main_thread():
        yield False
        return
    previous = {signum: signal.signal(signum, _record) for signum in (*STOP_SIGNALS, SNAPSHOT_SIGNAL)
                if signal.getsignal(signum) is not _record}
    escalate, _escalate = _escalate, False
    try:
        yield True
    finally:
        _escalate, _snapshot = escalate, False
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if any(signum in previous for signum in STOP_SIGNALS):
            _pending = None


def ignore() -> None:
    """Ignore further stop signals (the process is exiting; its exit code is decided)."""
    if _in_main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


def pending() -> Optional[int]:
    """The stop signal recorded and not yet acted on, if any."""
    return _pending


def take() -> Optional[int]:
    """The pending stop signal, which the caller now acts on (it is no longer pending)."""
    global _pending
    signum, _pending = _pending, None
    return signum


def take_snapshot() -> bool:
    """True once per SIGUSR1 recorded (during a run) since the last call: the caller saves a snapshot."""
    global _snapshot
    asked, _snapshot = _snapshot, False
    return asked


def check() -> None:
    """A safe point: raise :class:`Interrupted` if a stop signal arrived."""
    signum = take()
    if signum is not None:
        raise Interrupted(signum)
