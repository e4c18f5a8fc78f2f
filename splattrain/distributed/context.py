"""The rank context of a run: who this process is, its device and threads, and the collectives
the trainer calls (a single process gets a context whose calls do nothing)."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from ..console import Console
from ..errors import ConfigError, UserError
from .early import EARLY_MIN_BYTES, EarlyReduce, active_part
from .sync import all_reduce_flat, start_all_reduce

_BACKENDS = ("auto", "gloo", "nccl")


class PeerStoppedError(UserError):
    """Another rank left the run (it failed or was stopped) while this one waited in a collective;
    that rank's own line names its error."""


@contextmanager
def _collective(ctx: "DistContext", what: str) -> Iterator[None]:
    """Turn a collective's failure because a peer is gone into one :class:`PeerStoppedError` line."""
    try:
        yield
    except RuntimeError as error:
        if not ctx.enabled or isinstance(error, UserError):
            raise
        detail = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        raise PeerStoppedError(
            f"rank {ctx.rank} of {ctx.world_size}: another rank left the run during {what} (its own line "
            f"names its error); stopping ({detail[:160]})"
        ) from None


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value in (None, "") else int(value)


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@dataclass
class DistContext:
    """This process's place in a run: ``rank`` of ``world_size`` (``local_rank`` of
    ``local_world_size`` on its machine), its ``device`` and, on the CPU, its thread count.

    A run started by torchrun (``WORLD_SIZE`` > 1 in the environment) joins the process group;
    otherwise the context is a single process and every collective returns at once.
    ``bytes_reduced`` and ``comm_seconds`` add up the gradient and statistics all-reduces.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    backend: Optional[str] = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    threads: int = 0
    bytes_reduced: int = 0
    comm_seconds: float = 0.0
    #: seconds per part of the communication: ``pack``/``all_reduce``/``unpack`` (gradient bucket),
    #: ``flags`` (the per-step agreement), ``statistics`` (strategy statistics)
    comm_breakdown: Dict[str, float] = field(default_factory=dict)
    pending_signal: int = 0  #: the signal this rank sends in the next gradient exchange (0: none)
    #: the signal each rank sent in the last gradient exchange (0: none), by rank
    agreed_signals: List[int] = field(default_factory=list)
    early: EarlyReduce = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.early = EarlyReduce(self.comm_breakdown)

    @property
    def enabled(self) -> bool:
        """True when there is more than one rank."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0, the only rank that writes files and prints."""
        return self.rank == 0

    @classmethod
    def from_env(cls, backend: str, device: torch.device, threads: int = 0,
                 early_bytes: int = EARLY_MIN_BYTES) -> "DistContext":
        """The context torchrun's environment describes; joins the process group when it has
        more than one rank. ``device`` is the configured one: CUDA becomes ``cuda:LOCAL_RANK``.
        ``threads`` (0: the usable cores / local ranks) sets each CPU rank's thread count;
        ``early_bytes`` (-1: never) is :class:`EarlyReduce`'s threshold."""
        if backend not in _BACKENDS:
            raise ConfigError(f"trainer.dist_backend {backend!r}: use one of {', '.join(_BACKENDS)}")
        if early_bytes < -1:
            raise ConfigError(f"trainer.dist_early_bytes {early_bytes}: use a size in bytes, 0 (always) or -1 (never)")
        world_size = _env_int("WORLD_SIZE", 1)
        if world_size <= 1:
            return cls(device=device)
        rank, local_rank = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
        local_world_size = _env_int("LOCAL_WORLD_SIZE", world_size)
        if device.type == "cuda":
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
        if backend == "auto":
            backend = "nccl" if device.type == "cuda" else "gloo"
        if backend == "nccl" and device.type != "cuda":
            raise ConfigError("trainer.dist_backend nccl needs CUDA devices; use gloo (or auto) on the CPU")
        if device.type == "cpu":
            threads = threads if threads > 0 else max(1, usable_cores() // local_world_size)
            torch.set_num_threads(threads)
        if not dist.is_initialized():
            dist.init_process_group(backend=backend, init_method="env://", rank=rank, world_size=world_size)
        ctx = cls(rank, world_size, local_rank, local_world_size, backend, device, threads)
        ctx.early.min_bytes = float("inf") if early_bytes < 0 else early_bytes
        return ctx

    def describe(self) -> str:
        """One line for the run header."""
        if not self.enabled:
            return "single process"
        text = f"{self.world_size} ranks ({self.local_world_size} on this machine), backend {self.backend}"
        if self.device.type == "cpu":
            text += f", {self.threads} thread{'s' if self.threads != 1 else ''} per rank"
        return text

    def close(self) -> None:
        """Leave the process group (at the end of the run)."""
        if self.enabled and dist.is_initialized():
            dist.destroy_process_group()

    # -- training step -----------------------------------------------------------------
    def prepare_exchange(self, params: Mapping[str, Tensor], sh_degree: Optional[int] = None) -> None:
        """Before the step's last backward pass: let the higher SH bands' gradients start their
        all-reduce as soon as that pass has finished them (:class:`EarlyReduce`), while it computes
        the rest; :meth:`sync_gradients` completes the exchange."""
        if self.enabled:
            self.early.arm(params, sh_degree)

    def sync_gradients(self, optimizers: Mapping[str, torch.optim.Optimizer], losses: Dict[str, Tensor],
                       sh_degree: Optional[int] = None) -> Dict[str, Tensor]:
        """Average every optimised parameter's gradient and the step's loss terms over the ranks
        (flattened buckets: the early one :meth:`prepare_exchange` started, then one with the rest);
        returns the averaged, detached loss terms. Afterwards each gradient sent whole is a view of
        its averaged bucket.

        With ``sh_degree``, only the bands of ``shN`` that degree uses are sent: the others'
        gradients are zero on every rank (the degree follows the step), so leaving them out is exact.
        """
        if not self.enabled:
            return losses
        started = time.perf_counter()
        early = self.early.take()
        self.comm_seconds += self.early.seconds  # packing and starting the early bucket, in the backward pass
        self.early.seconds = 0.0
        done = early[0] if early is not None else None
        named = [(name, p) for name, opt in optimizers.items() for group in opt.param_groups for p in group["params"]
                 if p.grad is not None and p is not done]
        params = [p for _, p in named]
        grads = [active_part(name, p.grad, sh_degree) for name, p in named]
        if any(g.is_sparse for g in grads):
            raise ConfigError("sparse gradients (renderer.sparse_grad) cannot be averaged across ranks; turn them off")
        names = list(losses)
        # the loss terms, then one slot per rank for the signal it has pending: everything else
        # the step agrees on travels in the last gradient bucket
        signals = torch.zeros(self.world_size, device=self.device)
        signals[self.rank] = float(self.pending_signal)
        self.pending_signal = 0
        values = torch.cat([torch.stack([losses[k].detach().float().reshape(()) for k in names]).to(self.device),
                            signals])
        scale = 1.0 / self.world_size
        with _collective(self, "the gradient exchange"):
            pending = start_all_reduce([*grads, values], timings=self.comm_breakdown)
            if early is not None:
                param, sent, reduction = early
                self._rebind([param], [sent], reduction.finish(scale, self.comm_breakdown))
                self.bytes_reduced += reduction.nbytes
            averaged = pending.finish(scale, self.comm_breakdown)
        self.bytes_reduced += pending.nbytes
        self._rebind(params, grads, averaged)
        values = averaged[-1]
        self.agreed_signals = [int(round(float(v) * self.world_size)) for v in values[len(names):]]
        self.comm_seconds += time.perf_counter() - started
        return {k: values[i] for i, k in enumerate(names)}

    @staticmethod
    def _rebind(params: Sequence[Tensor], sent: Sequence[Tensor], averaged: Sequence[Tensor]) -> None:
        """Each gradient sent whole becomes a view of its averaged bucket; of one sent in part (the
        SH bands in use) the part is copied back (the rest is zero on every rank)."""
        for param, part, grad in zip(params, sent, averaged):
            if part.shape == param.grad.shape:
                param.grad = grad
            else:
                part.copy_(grad)

    def any_rank(self, flags: Sequence[int]) -> List[int]:
        """The largest value of each flag over the ranks (a step skipped or a signal on any rank)."""
        return [int(v) for v in self._max_over_ranks(flags, torch.int64, "the step agreement", "flags")]

    def max_over_ranks(self, values: Sequence[float]) -> List[float]:
        """The largest of each value over the ranks (e.g. memory readings every rank must act on alike)."""
        return [float(v) for v in self._max_over_ranks(values, torch.float64, "an agreement on readings", "agreement")]

    def _max_over_ranks(self, values: Sequence[float], dtype: torch.dtype, what: str, part: str) -> List[float]:
        """One all-reduce (max) of ``values`` as ``dtype``, counted in ``comm_breakdown[part]``."""
        if not self.enabled:
            return list(values)
        started = time.perf_counter()
        tensor = torch.tensor(list(values), dtype=dtype, device=self.device)
        with _collective(self, what):
            dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        self._count(part, started)
        return tensor.tolist()

    def _count(self, part: str, started: float) -> None:
        seconds = time.perf_counter() - started
        self.comm_seconds += seconds
        self.comm_breakdown[part] = self.comm_breakdown.get(part, 0.0) + seconds

    # -- strategy statistics ----------------------------------------------------------------
    def sum_statistics(self, tensors: List[Tensor]) -> None:
        """Sum ``tensors`` (a step's per-Gaussian increments) over the ranks in place: one flattened
        all-reduce per dtype, counted under ``statistics``."""
        if not self.enabled or not tensors:
            return
        started = time.perf_counter()
        with _collective(self, "the statistics exchange"):
            self.bytes_reduced += all_reduce_flat(tensors, op=dist.ReduceOp.SUM)
        self._count("statistics", started)

    def reduce_statistics(self, state: Dict[str, Any], modes: Mapping[str, str]) -> None:
        """Combine the state entries ``modes`` names (``"sum"`` or ``"max"``) across ranks in place."""
        if not self.enabled:
            return
        started = time.perf_counter()
        for mode, op in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX)):
            tensors = [state[k] for k, m in modes.items() if m == mode and isinstance(state.get(k), Tensor)]
            if tensors:
                with _collective(self, "the statistics exchange"):
                    self.bytes_reduced += all_reduce_flat(tensors, op=op)
        self._count("statistics", started)

    def release_statistics(self, state: Dict[str, Any], modes: Mapping[str, str]) -> None:
        """Ranks other than 0 zero the summed entries of ``modes``: after the statistics were
        combined (or restored), so that the sum over the ranks stays the run's total (held by rank
        0, and by its checkpoints). The strategy knows when that is (it holds no flag here)."""
        if not self.enabled or self.is_main:
            return
        for key, mode in modes.items():
            if mode == "sum" and isinstance(state.get(key), Tensor):
                state[key].zero_()

    # -- validation ------------------------------------------------------------------------
    def owns_view(self, index: int) -> bool:
        """Whether this rank renders test view ``index`` (views are dealt round-robin)."""
        return index % self.world_size == self.rank

    def gather_views(self, items: List[tuple[int, Dict[str, Any]]]) -> List[Dict[str, Any]]:
        """Every rank's ``(index, scores)`` pairs, merged in view order, on every rank."""
        if not self.enabled:
            return [scores for _, scores in sorted(items, key=lambda item: item[0])]
        gathered: List[Any] = [None] * self.world_size
        with _collective(self, "validation"):
            dist.all_gather_object(gathered, items)
        merged = [item for part in gathered for item in part]
        return [scores for _, scores in sorted(merged, key=lambda item: item[0])]

    def gather_objects(self, item: Any) -> List[Any]:
        """Every rank's ``item`` (picklable), in rank order, on every rank."""
        if not self.enabled:
            return [item]
        gathered: List[Any] = [None] * self.world_size
        with _collective(self, "an exchange of notes"):
            dist.all_gather_object(gathered, item)
        return gathered

    def gather_checksums(self, checksums: Tensor) -> List[Tensor]:
        """Every rank's checksum table (rank order)."""
        if not self.enabled:
            return [checksums]
        local = checksums.to(self.device)  # NCCL gathers device tensors only
        out = [torch.empty_like(local) for _ in range(self.world_size)]
        with _collective(self, "the replica check"):
            dist.all_gather(out, local)
        return [t.cpu() for t in out]


class RankConsole(Console):
    """The console of a rank other than 0: shows only warnings, prefixed with the rank, and writes
    no log file (rank 0's console writes log.txt)."""

    def __init__(self, rank: int, base: Optional[Console] = None) -> None:
        super().__init__(quiet=True, verbose=False, terminal=base.terminal if base is not None else None)
        self.rank = rank

    def open_log(self, path) -> None:  # noqa: D102 - rank 0 writes the log
        return

    def hold_log(self) -> None:  # noqa: D102 - nothing is kept for a log this rank never opens
        return

    def warning(self, message: str, once: Optional[str] = None) -> None:
        super().warning(f"[rank {self.rank}] {message}", once=once)


def shard(items: Iterable[Any], ctx: DistContext) -> Iterable[tuple[int, Any]]:
    """``(index, item)`` for the items this rank owns."""
    return ((i, item) for i, item in enumerate(items) if ctx.owns_view(i))
