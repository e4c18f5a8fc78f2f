"""Stop signals of a command-line process: recorded where they land, acted on at safe points.

A ``KeyboardInterrupt`` raised at an arbitrary bytecode can land inside a library's import,
inside a callback that C++ code made (which then aborts the process) or inside a ``finally``
block that turns it into an unrelated error. So the command line records SIGINT / SIGTERM
(:func:`defer`) and long-running work polls :func:`check` between units of work (images
decoded, views rendered, requests served); the trainer's AutoCheckpointHook takes over for
training steps. A second signal before the first was acted on stops at once.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Dict, Optional

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_pending: Optional[int] = None
_installed: Dict[int, Any] = {}


class Interrupted(KeyboardInterrupt):
    """The process was asked to stop by ``signum`` (SIGINT or SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _record(signum: int, frame: object) -> None:
    global _pending
    if _pending is not None:  # asked twice: stop where we are
        raise Interrupted(_pending)
    _pending = signum


def defer() -> None:
    """Record SIGINT and SIGTERM from now on instead of raising where they land (main thread
    only; :func:`restore` puts the previous handlers back)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in STOP_SIGNALS:
        previous = signal.signal(signum, _record)
        _installed.setdefault(signum, previous)


def restore() -> None:
    """The handlers from before :func:`defer`; forgets a pending signal."""
    global _pending
    for signum, handler in _installed.items():
        signal.signal(signum, handler)
    _installed.clear()
    _pending = None


def ignore() -> None:
    """Ignore further stop signals (the process is exiting; its exit code is decided)."""
    if threading.current_thread() is threading.main_thread():
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


def check() -> None:
    """A safe point: raise :class:`Interrupted` if a stop signal arrived."""
    signum = take()
    if signum is not None:
        raise Interrupted(signum)
