"""One job ahead on a background thread: the next batch is prepared while the current step runs."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Generic, Optional, TypeVar

T = TypeVar("T")


class Prefetcher(Generic[T]):
    """Runs jobs one at a time on a single worker thread, overlapping them with the caller.

    ``submit`` starts a job, ``take`` waits for it and returns its result (raising what it
    raised), ``discard`` forgets it. A job must not touch state the caller changes meanwhile.
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="splattrain-prefetch")
        self._pending: Optional[Future[T]] = None

    @property
    def pending(self) -> bool:
        """Whether a job was submitted and not yet taken or discarded."""
        return self._pending is not None

    def submit(self, fn: Callable[..., T], *args: Any) -> None:
        """Start ``fn(*args)`` in the background (after any job already running)."""
        self._pending = self._pool.submit(fn, *args)

    def take(self) -> T:
        """The result of the submitted job, waiting for it if needed."""
        if self._pending is None:
            raise RuntimeError("Prefetcher.take() without a submitted job")
        future, self._pending = self._pending, None
        return future.result()

    def discard(self) -> None:
        """Forget the submitted job (it may still finish in the background)."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    def close(self) -> None:
        """Stop the worker thread once the running job (if any) is done."""
        self.discard()
        self._pool.shutdown(wait=True)
