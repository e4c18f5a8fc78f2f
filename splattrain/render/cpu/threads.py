"""How many threads the compiled library's parallel loops use, and the cores while training runs.

The library runs its loops on workers of its own (``worker_pool.h``); PyTorch runs its operations
on its OpenMP team. Both teams' idle threads poll for work for a while before they sleep, so
with both at full size each polls on the cores the other needs. While training runs
(:func:`cores_for_the_library`), the library's loops get the process's threads and PyTorch's
own operations one: the operations left in a step besides the library's are small.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

_loop_threads = 0  # 0: PyTorch's thread count


def loop_threads() -> int:
    """Threads for the library's next parallel loop."""
    return _loop_threads or torch.get_num_threads()


@contextmanager
def cores_for_the_library() -> Iterator[int]:
    """Within the block, the library's loops run on ``torch.get_num_threads()`` threads (the
    count on entry) and PyTorch's own operations on one; both are restored on exit. Yields the
    library's thread count. Nested blocks keep the outer one's split."""
    global _loop_threads
    if _loop_threads:
        yield _loop_threads
        return
    threads = torch.get_num_threads()
    _loop_threads = threads
    torch.set_num_threads(1)
    try:
        yield threads
    finally:
        _loop_threads = 0
        torch.set_num_threads(threads)
