"""How many threads the compiled library's parallel loops use, and the cores while training runs.

The library runs its loops on workers of its own (``worker_pool.h``); PyTorch runs its operations
on its OpenMP team. Both teams' idle threads poll for work for a while before they sleep, so
with both at full size each polls on the cores the other needs. While training runs
(:func:`cores_for_the_library`), the library's loops get the process's threads and PyTorch's
own operations one: the operations left in a step besides the library's are small.

Like PyTorch's own thread count (an OpenMP setting of the calling thread), the split belongs to
the thread that made it.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import torch

_split = threading.local()  # .threads: the library's loop threads in a cores_for_the_library block


def loop_threads() -> int:
    """Threads for the calling thread's next library loop."""
    return getattr(_split, "threads", 0) or torch.get_num_threads()


def set_loop_threads(threads: int) -> None:
    """Within a :func:`cores_for_the_library` block, give the library's loops ``threads`` threads."""
    if not getattr(_split, "threads", 0):
        raise RuntimeError("set_loop_threads is for a cores_for_the_library block")
    _split.threads = max(1, int(threads))


@contextmanager
def cores_for_the_library() -> Iterator[int]:
    """Within the block, the library's loops run on ``torch.get_num_threads()`` threads (the
    count on entry) and PyTorch's own operations on one; both are restored on exit. Yields the
    library's thread count. A nested block keeps the outer one's split."""
    if getattr(_split, "threads", 0):
        yield _split.threads
        return
    threads = torch.get_num_threads()
    _split.threads = threads
    torch.set_num_threads(1)
    try:
        yield threads
    finally:
        _split.threads = 0
        torch.set_num_threads(threads)
