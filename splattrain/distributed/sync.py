"""Collective operations on flattened buckets of tensors (one call per bucket, not per tensor)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence

import torch
import torch.distributed as dist
from torch import Tensor

#: Gradients are all-reduced in buckets of at most this many bytes (DDP's default size).
BUCKET_BYTES = 25 * 2**20


def buckets(tensors: Sequence[Tensor], max_bytes: int = BUCKET_BYTES) -> List[List[Tensor]]:
    """``tensors`` cut, in order, into runs of one dtype and device of at most ``max_bytes`` each
    (a tensor larger than that gets a bucket of its own)."""
    out: List[List[Tensor]] = []
    size = 0
    for tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        last = out[-1] if out else None
        if last is None or size + nbytes > max_bytes or last[0].dtype != tensor.dtype or last[0].device != tensor.device:
            out.append([tensor])
            size = nbytes
        else:
            last.append(tensor)
            size += nbytes
    return out


def _add(timings: Optional[Dict[str, float]], key: str, seconds: float) -> None:
    if timings is not None:
        timings[key] = timings.get(key, 0.0) + seconds


def _flatten(group: List[Tensor]) -> Tensor:
    """The bucket as one flat tensor: a lone contiguous tensor is reduced in place (no copy)."""
    if len(group) == 1 and group[0].is_contiguous():
        return group[0].view(-1)
    return torch.cat([t.reshape(-1) for t in group])


@dataclass
class PendingReduce:
    """An all-reduce started by :func:`start_all_reduce` and not waited for yet."""

    groups: List[List[Tensor]]  # the tensors of each bucket
    flats: List[Tensor]  # each bucket flattened: reduced in place
    works: List[Any]  # the collectives' handles
    nbytes: int  # bytes sent per rank (the buckets' sizes)

    def finish(self, scale: float = 1.0, timings: Optional[Dict[str, float]] = None) -> List[Tensor]:
        """Wait for the reduction and multiply it by ``scale``; returns, per tensor, a view of its
        result shaped like it. ``timings`` adds the seconds waited (``all_reduce``) and spent
        scaling and splitting (``unpack``)."""
        views: List[Tensor] = []
        for group, flat, work in zip(self.groups, self.flats, self.works):
            t0 = time.perf_counter()
            work.wait()
            t1 = time.perf_counter()
            if scale != 1.0:
                flat.mul_(scale)
            views.extend(part.view_as(t) for t, part in zip(group, torch.split(flat, [t.numel() for t in group])))
            _add(timings, "all_reduce", t1 - t0)
            _add(timings, "unpack", time.perf_counter() - t1)
        return views


def start_all_reduce(tensors: Sequence[Tensor], op: dist.ReduceOp = dist.ReduceOp.SUM,
                     max_bytes: int = BUCKET_BYTES, timings: Optional[Dict[str, float]] = None) -> PendingReduce:
    """Start all-reducing ``tensors``, flattened into buckets of at most ``max_bytes`` (one
    collective each; a bucket of one contiguous tensor is reduced in place, the others are copies),
    without waiting; ``timings`` adds the seconds spent packing (``pack``) and starting the
    collectives (``all_reduce``)."""
    t0 = time.perf_counter()
    groups = buckets(tensors, max_bytes)
    flats = [_flatten(group) for group in groups]
    t1 = time.perf_counter()
    works = [dist.all_reduce(flat, op=op, async_op=True) for flat in flats]
    _add(timings, "pack", t1 - t0)
    _add(timings, "all_reduce", time.perf_counter() - t1)
    return PendingReduce(groups, flats, works, sum(f.numel() * f.element_size() for f in flats))


def all_reduce_flat(tensors: Sequence[Tensor], op: dist.ReduceOp = dist.ReduceOp.SUM,
                    max_bytes: int = BUCKET_BYTES) -> int:
    """All-reduce ``tensors`` in place, flattened into buckets; returns the bytes sent per rank
    (the sum of the buckets' sizes)."""
    pending = start_all_reduce(tensors, op, max_bytes)
    for tensor, result in zip(tensors, pending.finish()):
        if result.data_ptr() != tensor.data_ptr():  # reduced in place otherwise
            tensor.copy_(result)
    return pending.nbytes


def parameter_checksums(tensors: Iterable[Tensor]) -> Tensor:
    """Per tensor: its element count and the sum of its bit patterns as int64 (exact and independent
    of summation order, so replicas with equal bits give equal sums) -> int64 [T, 2] on the CPU."""
    rows = []
    for tensor in tensors:
        t = tensor.detach().contiguous().reshape(-1)
        if t.dtype in (torch.float32, torch.int32):
            bits = t.view(torch.int32)
        elif t.dtype in (torch.float64, torch.int64):
            bits = t.view(torch.int64)
        else:
            bits = t.to(torch.float64).view(torch.int64)
        rows.append(torch.stack([torch.tensor(t.numel()), bits.to(torch.int64).sum().cpu()]))
    return torch.stack(rows) if rows else torch.zeros(0, 2, dtype=torch.int64)
