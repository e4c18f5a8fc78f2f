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

A process of its own (the command line, :func:`defer` with ``watchdog=True``) does not depend on
reaching a safe point: a stop signal not acted on within :data:`SAFE_POINT_SECONDS` (work stuck
in a long loop, a library call that never returns to a safe point), or a process still stopping
:data:`STOP_SECONDS` after it, ends the process at once from a watchdog thread, with exit code
130 / 143 and one line on stderr. Only code that holds the interpreter lock the whole time (a
C extension that never releases it) keeps the watchdog from running.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Set

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: The signal that asks a training run for a snapshot checkpoint; training goes on.
SNAPSHOT_SIGNAL = signal.SIGUSR1

_pending: Optional[int] = None
_snapshot = False
_escalate = True
_installed: Dict[int, Any] = {}
#: Seconds a stop signal waits for a safe point before the process ends without one (a training
#: step, a decoded image or a served view is far shorter).
SAFE_POINT_SECONDS = 5.0
#: Seconds from a stop signal to the end of the process, whatever it is still doing (saving a
#: checkpoint, closing writers).
STOP_SECONDS = 9.0
#: Files the watchdog removes before it ends the process (temporaries still being written).
_doomed: Set[str] = set()


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


class _Watchdog:
    """A daemon thread that ends the process when a stop signal is not acted on in time.

    It sleeps on an Event until the first stop signal (:meth:`signalled`, called from the signal
    handler, takes no lock the main thread could hold), then exits the process with
    ``128 + signum`` once the signal has waited :data:`SAFE_POINT_SECONDS` for a safe point, or
    :data:`STOP_SECONDS` have passed since it came.
    """

    def __init__(self) -> None:
        self.wake = threading.Event()
        self.signum = 0
        self.at = 0.0
        self.cancelled = False
        threading.Thread(target=self._watch, name="splattrain-stop-watchdog", daemon=True).start()

    def signalled(self, signum: int) -> None:
        if not self.wake.is_set():
            self.signum, self.at = signum, time.monotonic()
            self.wake.set()

    def cancel(self) -> None:
        self.cancelled = True
        self.wake.set()

    def _watch(self) -> None:
        self.wake.wait()
        while not self.cancelled:
            waited = time.monotonic() - self.at
            if _pending is not None and waited >= SAFE_POINT_SECONDS:
                self._exit(f"no safe point came within {SAFE_POINT_SECONDS:g} s; ended at once")
            if waited >= STOP_SECONDS:
                self._exit(f"still stopping after {STOP_SECONDS:g} s; ended at once")
            time.sleep(0.05)

    def _exit(self, why: str) -> None:
        for path in list(_doomed):  # their writers' cleanup will not run
            try:
                os.unlink(path)
            except OSError:
                pass
        try:  # a raw write: a lock on sys.stderr may be held by the stuck thread
            os.write(2, f"stopped by {signal.Signals(self.signum).name}: {why}\n".encode())
        finally:
            os._exit(128 + self.signum)


_watchdog: Optional[_Watchdog] = None


def _record(signum: int, frame: object) -> None:
    global _pending, _snapshot
    if signum == SNAPSHOT_SIGNAL:
        _snapshot = True
        return
    if _watchdog is not None:
        _watchdog.signalled(signum)
    if _pending is not None and _escalate:  # asked twice: stop where we are
        raise Interrupted(_pending)
    _pending = signum


@contextmanager
def removed_if_ended(path: Path) -> Iterator[None]:
    """While the block runs, ``path`` is removed should the watchdog end the process (which skips
    every ``finally``: the block's own cleanup would not run)."""
    _doomed.add(str(path))
    try:
        yield
    finally:
        _doomed.discard(str(path))


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def defer(watchdog: bool = False) -> None:
    """Record SIGINT and SIGTERM from now on instead of raising where they land (main thread
    only; :func:`restore` puts the previous handlers back). ``watchdog`` (a process of its own
    only: it may end the process) bounds the time from a stop signal to the process's end."""
    global _watchdog
    if not _in_main_thread():
        return
    if watchdog and _watchdog is None:
        _watchdog = _Watchdog()
    for signum in STOP_SIGNALS:
        previous = signal.signal(signum, _record)
        _installed.setdefault(signum, previous)


def reinstall() -> None:
    """Put :func:`defer`'s handlers back in place of any a native library installed meanwhile
    (glog's failure handler takes SIGTERM when pycolmap loads); no-op outside :func:`defer`."""
    if _in_main_thread():
        for signum in _installed:
            signal.signal(signum, _record)


def restore() -> None:
    """The handlers from before :func:`defer`; forgets a pending signal and stops the watchdog."""
    global _pending, _snapshot, _watchdog
    if _watchdog is not None:
        _watchdog.cancel()
        _watchdog = None
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
