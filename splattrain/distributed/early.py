"""Starting the all-reduce of the gradients the backward pass finishes first while it computes the
rest: the higher SH bands' gradients (the renderers run the colours' backward before the
geometry's, and the bands are most of the bytes) travel while the projection's backward runs."""

from __future__ import annotations

import time
import weakref
from typing import Any, Dict, Mapping, Optional, Tuple

from torch import Tensor

from .sync import PendingReduce, start_all_reduce

#: The parameter whose gradient is all-reduced as soon as the backward pass has finished it (at the
#: full SH degree in place, without a copy).
EARLY_PARAMETER = "shN"
#: Below this many bytes (``trainer.dist_early_bytes``) the bands are not sent on their own (one
#: more collective would cost more latency than it hides): they travel with the other gradients.
EARLY_MIN_BYTES = 2**20


def active_part(name: str, grad: Tensor, sh_degree: Optional[int]) -> Tensor:
    """The part of parameter ``name``'s gradient a step at ``sh_degree`` can make non-zero (a view)."""
    if name != "shN" or sh_degree is None or grad.is_sparse or grad.dim() != 3:
        return grad
    return grad[:, :(sh_degree + 1) ** 2 - 1]


class EarlyReduce:
    """One step's early all-reduce: :meth:`arm` before the step's last backward pass; a hook on the
    parameter (called by autograd once its gradient is final) starts the all-reduce; :meth:`take`
    hands it to the exchange after the backward pass."""

    def __init__(self, timings: Dict[str, float], min_bytes: float = EARLY_MIN_BYTES) -> None:
        self.timings = timings
        self.min_bytes = min_bytes
        self.seconds = 0.0  # spent packing and starting, added to the communication time by the exchange
        self.started = 0  # early all-reduces started (steps whose SH bands travelled during the backward pass)
        self._hooked: Dict[int, Any] = {}  # id(param) -> weak reference, for the parameters with our hook
        self._armed: Optional[Tensor] = None
        self._sh_degree: Optional[int] = None
        self._launched: Optional[Tuple[Tensor, Tensor, PendingReduce]] = None

    def arm(self, params: Mapping[str, Tensor], sh_degree: Optional[int]) -> None:
        """Start the all-reduce of ``params["shN"]``'s gradient (the bands ``sh_degree`` uses) as soon
        as the next backward pass has finished it, when it is trained and those bands reach
        ``min_bytes``."""
        self.disarm()
        param = params.get(EARLY_PARAMETER)
        if param is None or not param.requires_grad:
            return
        nbytes = active_part(EARLY_PARAMETER, param, sh_degree).numel() * param.element_size()
        if nbytes == 0 or nbytes < self.min_bytes:  # SH degree 0 uses no band
            return
        self._hooked = {key: ref for key, ref in self._hooked.items() if ref() is not None}
        ref = self._hooked.get(id(param))
        if ref is None or ref() is not param:  # a parameter replaced by densification needs the hook again
            param.register_post_accumulate_grad_hook(self._gradient_ready)
            self._hooked[id(param)] = weakref.ref(param)
        self._armed, self._sh_degree = param, sh_degree

    def disarm(self) -> None:
        """Forget the armed parameter and any all-reduce started (before a new step)."""
        self._armed, self._launched = None, None

    def _gradient_ready(self, param: Tensor) -> None:
        if param is not self._armed or self._launched is not None or param.grad is None or param.grad.is_sparse:
            return
        started = time.perf_counter()
        sent = active_part(EARLY_PARAMETER, param.grad, self._sh_degree)
        self._launched = (param, sent, start_all_reduce([sent], timings=self.timings))
        self.started += 1
        self.seconds += time.perf_counter() - started

    def take(self) -> Optional[Tuple[Tensor, Tensor, PendingReduce]]:
        """The all-reduce started in the backward pass (the parameter, the gradient part sent, the
        reduction), or None; disarms."""
        launched = self._launched
        self.disarm()
        return launched
