"""What a file may make the process allocate: its declared counts checked against its size and the
memory at hand before anything is allocated, and compressed streams inflated no further than their
header declares. Every reader of a file a user is sent goes through these checks."""

from __future__ import annotations

import resource
import zlib
from typing import TYPE_CHECKING, Dict, Optional

from ..errors import DataError

if TYPE_CHECKING:  # pragma: no cover - PyTorch is imported where tensors are checked
    from torch import Tensor

#: Deflate's largest expansion (a 258-byte match per 2 bits): gzip data cannot hold more.
MAX_DEFLATE_RATIO = 1032
#: Zstandard's largest expansion (a 128 KiB RLE block from 4 bytes).
MAX_ZSTD_RATIO = 1 << 15
_CHUNK = 1 << 20


def _meminfo_available() -> Optional[int]:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _address_space_left() -> Optional[int]:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            used = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmSize:"))
    except (OSError, ValueError, StopIteration):
        used = 0
    return max(0, soft - used)


def available_memory() -> Optional[int]:
    """Bytes this process can still allocate (free memory, or what its address-space limit leaves);
    None where the system does not say."""
    known = [value for value in (_meminfo_available(), _address_space_left()) if value is not None]
    return min(known) if known else None


def gib(size: float) -> str:
    """``size`` bytes as a short human figure."""
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"


def require_memory(what: str, needed: float) -> None:
    """Refuse (DataError naming ``what``) work needing more memory than the process can allocate."""
    free = available_memory()
    if free is not None and needed > free:
        raise DataError(f"{what} needs about {gib(needed)} of memory, more than the {gib(free)} available")


def gunzip_exact(raw: bytes, size_of, name: str, header_size: int) -> bytes:
    """Inflate the gzip ``raw`` to exactly ``size_of(header)`` bytes (``size_of`` reads the first
    ``header_size`` inflated bytes and returns the total the header declares, raising when the
    header is invalid, the total more than ``raw`` can inflate to or more than memory can hold);
    refuses corrupt data, a short body and trailing bytes, and never inflates more than the
    header declares."""
    inflater = zlib.decompressobj(wbits=31)
    try:
        header = inflater.decompress(raw, header_size)
        if len(header) < header_size:
            raise DataError(f"{name}: too short for its header ({len(header)} bytes after gunzip)")
        total = size_of(header)  # raises for a total more than MAX_DEFLATE_RATIO x len(raw)
        parts, have = [header], header_size
        while have < total:
            piece = inflater.decompress(inflater.unconsumed_tail, min(_CHUNK, total - have))
            if not piece:
                break
            parts.append(piece)
            have += len(piece)
        more = inflater.decompress(inflater.unconsumed_tail, 1)
    except zlib.error as err:
        raise DataError(f"{name}: corrupt gzip data ({err})") from None
    if have < total:
        raise DataError(f"{name}: truncated ({have} bytes after gunzip, {total} declared)")
    if not more and not inflater.eof:
        raise DataError(f"{name}: truncated (the gzip stream does not end)")
    if more or inflater.unused_data:
        raise DataError(f"{name}: trailing bytes after the {total} bytes its header declares")
    return b"".join(parts)


def unzstd_exact(decompressor, frame: bytes, size: int, name: str) -> bytes:
    """Decompress one zstd ``frame`` to exactly ``size`` bytes, streaming (a frame's own declared
    content size is not trusted), refusing short, long and corrupt frames."""
    import io

    import zstandard

    try:
        reader = decompressor.stream_reader(io.BytesIO(frame), read_across_frames=False)
        parts, have = [], 0
        while have <= size:
            piece = reader.read(min(_CHUNK, size + 1 - have))
            if not piece:
                break
            parts.append(piece)
            have += len(piece)
    except zstandard.ZstdError as err:
        raise DataError(f"{name}: does not decompress ({err})") from None
    if have != size:
        raise DataError(f"{name}: {'more' if have > size else 'fewer'} bytes than the {size} declared")
    return b"".join(parts)


def require_finite(params: Dict[str, Tensor], name: str) -> None:
    """Refuse Gaussians holding NaN or infinite values (DataError naming the file and how many)."""
    import torch

    n = params["means"].shape[0]
    bad = torch.zeros(n, dtype=torch.bool)
    for value in params.values():
        if value.numel():
            bad |= ~torch.isfinite(value.reshape(n, value.numel() // n)).all(dim=1)
    if bool(bad.any()):
        raise DataError(f"{name}: {int(bad.sum())} of {n} Gaussians hold NaN or infinite values")
