"""Collective operations on flattened buckets of tensors (one call per bucket, not per tensor)."""

from __future__ import annotations

import time
from typing import Dict, Iterable, List, Optional, Sequence

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


def all_reduce_flat(tensors: Sequence[Tensor], op: dist.ReduceOp = dist.ReduceOp.SUM, scale: float = 1.0,
                    max_bytes: int = BUCKET_BYTES, timings: Optional[Dict[str, float]] = None,
                    views: Optional[List[Tensor]] = None) -> int:
    """All-reduce ``tensors`` in place, flattened into buckets, then multiply by ``scale``;
    returns the bytes sent per rank (the sum of the buckets' sizes). ``timings`` (optional) adds
    the seconds spent packing (``pack``), in the collective (``all_reduce``) and unpacking (``unpack``).
    With a ``views`` list the results are not copied back: it receives, per tensor, a view of its
    bucket shaped like it (for gradients the caller rebinds, saving a copy)."""
    sent = 0
    clock = time.perf_counter
    for bucket in buckets(tensors, max_bytes):
        t0 = clock()
        flat = torch.cat([t.reshape(-1) for t in bucket])
        t1 = clock()
        dist.all_reduce(flat, op=op)
        t2 = clock()
        if scale != 1.0:
            flat.mul_(scale)
        sent += flat.numel() * flat.element_size()
        for tensor, part in zip(bucket, torch.split(flat, [t.numel() for t in bucket])):
            if views is not None:
                views.append(part.view_as(tensor))
            else:
                tensor.copy_(part.view_as(tensor))
        if timings is not None:
            for key, seconds in (("pack", t1 - t0), ("all_reduce", t2 - t1), ("unpack", clock() - t2)):
                timings[key] = timings.get(key, 0.0) + seconds
    return sent


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
