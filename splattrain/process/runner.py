"""A blocking pycolmap call run on a worker thread, so the command can draw progress and stop it.

pycolmap's pipelines release the GIL; the calling thread polls a progress count and, when a
stop signal was recorded (:mod:`splattrain.interrupts`), cancels the call through its
cancellation token and then raises :class:`~splattrain.interrupts.Interrupted`. What the
call had written by then (features, matches in the database) is kept for the next run.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Optional, TypeVar

from .. import interrupts
from ..errors import UserError

T = TypeVar("T")


def run_polled(work: Callable[[Any], T], token: Any, poll: Callable[[], Optional[int]],
               progress: Callable[[int], None], interval: float = 0.25, stage: str = "a stage") -> T:
    """``work(token)`` on a worker thread; ``progress(poll())`` every ``interval`` seconds.

    ``token`` is a ``pycolmap.CancellationToken`` (or None where the call takes none: a stop
    signal then takes effect when the call returns). An error COLMAP reports (a database that is
    not one, a file it cannot read) is a UserError naming ``stage``.
    """
    outcome: Dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work(token)
        except BaseException as err:  # handed to the calling thread
            outcome["error"] = err

    thread = threading.Thread(target=target, name="pycolmap", daemon=True)
    thread.start()
    stopped = None  # the stop signal the call was cancelled for: acted on, the call winds down
    while thread.is_alive():
        thread.join(interval)
        done = poll()
        if done is not None:
            progress(done)
        if stopped is None and token is not None and interrupts.pending() is not None:
            stopped = interrupts.take()
            token.cancel()
    done = poll()
    if done is not None:
        progress(done)
    if stopped is not None:  # the call ended because it was cancelled (pycolmap raises "Operation cancelled")
        raise interrupts.Interrupted(stopped)
    if "error" in outcome:
        error = outcome["error"]
        if isinstance(error, (RuntimeError, ValueError)):
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            raise UserError(f"COLMAP {stage} failed: {(lines or [type(error).__name__])[-1][:300]} "
                            "(COLMAP's log: colmap/colmap.log.*)") from None
        raise error
    interrupts.check()
    return outcome["value"]
