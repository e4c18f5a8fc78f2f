"""Niantic's SPZ format (gzip, version 3), written and read to the format's reference description.

No maintained Python package implements it (the index has an 0.0.1 Rust binding and a reader
that pulls numba), so this module follows the reference C++ library (``load-spz.cc``)
operation for operation; the tests check it byte for byte on hand-computed inputs.

Layout, after gunzip: a 16-byte header (magic ``NGSP``, version, count, SH degree, fractional
bits, flags, reserved), then per attribute, for all Gaussians in turn: positions (3 x 24-bit
fixed point), alphas (sigmoid x 255), colours (the degree-0 SH coefficient x 0.15 x 255 +
127.5), scales (log scale + 10) x 16, rotations (smallest three, 4 bytes), higher-order SH
(coefficient-major, channel inner, 5 bits for degree 1 and 4 bits above).

Axes are stored as they are, as in the PLY: this is what the reference library's own PLY
converter (``ply_to_spz``) and PlayCanvas's splat-transform write and read, so an SPZ and a PLY
of one scene show the same way in viewers (the tests hold the encoder to ``ply_to_spz``'s bytes).
"""

from __future__ import annotations

import gzip
import math
import struct
from pathlib import Path
from typing import Dict, NamedTuple

import numpy as np
import torch
from torch import Tensor

from ..errors import DataError
from .atomic import atomic_write_bytes
from .limits import MAX_DEFLATE_RATIO, MAX_ZSTD_RATIO, gunzip_exact, require_finite, require_memory, unzstd_exact

MAGIC = 0x5053474E  # "NGSP"
VERSION = 3
FRACTIONAL_BITS = 12
FLAG_ANTIALIASED = 0x1
COLOR_SCALE = 0.15
SH1_BITS, SH_REST_BITS = 5, 4
_SQRT1_2 = 0.7071067811865476
_HEADER = struct.Struct("<IIIBBBB")
_HEADER_V4 = struct.Struct("<IIIBBBBI12x")
_MAX_LOGIT = 12.0



class SpzScene(NamedTuple):
    """Raw parameters read from an SPZ file, its SH degree and its antialiased flag."""

    params: Dict[str, Tensor]
    sh_degree: int
    antialiased: bool


def _round(x: np.ndarray) -> np.ndarray:
    """C's ``std::round`` (half away from zero), unlike numpy's half to even."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _to_uint8(x: np.ndarray) -> np.ndarray:
    return np.clip(_round(x.astype(np.float32)), 0, 255).astype(np.uint8)


def _quantize_sh(x: np.ndarray, bits: int) -> np.ndarray:
    bucket = 1 << (8 - bits)
    q = (_round(x.astype(np.float32) * 128.0) + 128.0).astype(np.int64)
    q = (q + bucket // 2) // bucket * bucket
    return np.clip(q, 0, 255).astype(np.uint8)


def _pack_quaternions(xyzw: np.ndarray) -> np.ndarray:
    """Smallest-three encoding: 2 bits for the largest component, 3 x (sign + 9 bits)."""
    q = xyzw / np.linalg.norm(xyzw, axis=1, keepdims=True)
    largest = np.argmax(np.abs(q), axis=1)
    negate = q[np.arange(len(q)), largest] < 0
    comp = largest.astype(np.uint32)
    for i in range(4):
        keep = largest != i
        negbit = ((q[:, i] < 0) ^ negate).astype(np.uint32)
        mag = (np.float32(511.0) * (np.abs(q[:, i]) / np.float32(_SQRT1_2)) + np.float32(0.5)).astype(np.uint32)
        comp = np.where(keep, (comp << 10) | (negbit << 9) | mag, comp)
    return comp.astype("<u4").view(np.uint8).reshape(-1, 4)


def _unpack_quaternions(raw: np.ndarray) -> np.ndarray:
    comp = raw.reshape(-1, 4).copy().view("<u4")[:, 0].astype(np.uint32)
    largest = comp >> 30
    out = np.zeros((len(comp), 4), np.float32)
    sum_sq = np.zeros(len(comp), np.float32)
    for i in range(3, -1, -1):
        stored = largest != i
        mag = (comp & 511).astype(np.float32)
        negbit = (comp >> 9) & 1
        value = np.float32(_SQRT1_2) * mag / np.float32(511.0)
        value = np.where(negbit == 1, -value, value)
        out[:, i] = np.where(stored, value, 0.0)
        sum_sq += np.where(stored, value * value, 0.0)
        comp = np.where(stored, comp >> 10, comp)
    rows = np.arange(len(out))
    out[rows, largest] = np.sqrt(np.maximum(0.0, 1.0 - sum_sq))
    return out


def _sh_dim(degree: int) -> int:
    return (degree + 1) ** 2 - 1


def encode_spz(params: Dict[str, Tensor], antialiased: bool = False) -> bytes:
    """The uncompressed SPZ payload (header + attribute streams) of raw Gaussian parameters."""
    means = params["means"].detach().cpu().float().numpy()
    n = means.shape[0]
    shN = params["shN"].detach().cpu().float().numpy().reshape(n, params["shN"].shape[1], 3)
    degree = int(round(math.sqrt(shN.shape[1] + 1))) - 1
    if _sh_dim(degree) != shN.shape[1] or degree > 3:
        raise DataError(f"SPZ: {shN.shape[1]} higher-order SH coefficients are not a whole degree <= 3")
    fixed = _round(means * np.float32(1 << FRACTIONAL_BITS)).astype(np.int64)
    if np.abs(fixed).max(initial=0) >= 1 << 23:
        limit = (1 << 23) / (1 << FRACTIONAL_BITS)
        raise DataError(f"SPZ: positions must lie within +-{limit:g} (24-bit fixed point)")
    positions = (fixed.astype("<i4").view(np.uint8).reshape(n, 3, 4)[:, :, :3]).reshape(-1)
    opacity = params["opacities"].detach().cpu().float().numpy().reshape(n)
    alphas = _to_uint8((1.0 / (1.0 + np.exp(-opacity))) * np.float32(255.0))
    sh0 = params["sh0"].detach().cpu().float().numpy().reshape(n, 3)
    colors = _to_uint8(sh0 * np.float32(COLOR_SCALE * 255.0) + np.float32(0.5 * 255.0))
    scales = _to_uint8((params["scales"].detach().cpu().float().numpy() + np.float32(10.0)) * np.float32(16.0))
    wxyz = params["quats"].detach().cpu().float().numpy()
    xyzw = np.concatenate([wxyz[:, 1:], wxyz[:, :1]], axis=1)
    rotations = _pack_quaternions(xyzw)
    packed_sh = np.concatenate(
        [_quantize_sh(shN[:, :3], SH1_BITS), _quantize_sh(shN[:, 3:], SH_REST_BITS)], axis=1
    ) if degree > 0 else np.zeros((n, 0, 3), np.uint8)
    header = _HEADER.pack(MAGIC, VERSION, n, degree, FRACTIONAL_BITS, FLAG_ANTIALIASED if antialiased else 0, 0)
    parts = [positions, alphas, colors.reshape(-1), scales.reshape(-1), rotations.reshape(-1), packed_sh.reshape(-1)]
    return header + b"".join(part.tobytes() for part in parts)


def write_spz(path: str | Path, params: Dict[str, Tensor], antialiased: bool = False) -> None:
    """Write ``path`` as a gzip-compressed SPZ (version 3), atomically."""
    blob = gzip.compress(encode_spz(params, antialiased), compresslevel=9, mtime=0)
    atomic_write_bytes(path, lambda handle: handle.write(blob))


def _v3_header(data: bytes, name: str, held: int) -> tuple:
    """(count, degree, fractional bits, flags, total payload bytes) of a version 2 or 3 header."""
    if len(data) < _HEADER.size:
        raise DataError(f"{name}: too short for an SPZ header")
    magic, version, n, degree, frac_bits, flags, _ = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise DataError(f"{name}: not an SPZ file (bad magic)")
    if version not in (2, 3):
        raise DataError(f"{name}: SPZ version {version} in a gzip file is not supported (2 and 3 are)")
    sizes = _stream_sizes(name, version, n, degree, frac_bits, held)
    return version, n, degree, frac_bits, flags, sizes


def decode_spz(data: bytes, name: str = "SPZ data") -> SpzScene:
    """Raw parameters from an uncompressed (gunzipped) SPZ payload of version 2 or 3."""
    version, n, degree, frac_bits, flags, sizes = _v3_header(data, name, max(0, len(data) - _HEADER.size))
    expected = _HEADER.size + sum(sizes)
    if len(data) != expected:
        state = "truncated" if len(data) < expected else "has trailing bytes"
        raise DataError(f"{name}: {state} ({len(data)} bytes, {expected} expected for {n} Gaussians)")
    offsets = np.cumsum([_HEADER.size] + sizes)
    streams = [data[offsets[i] : offsets[i + 1]] for i in range(6)]
    return _decode_streams(streams, version, n, degree, frac_bits, flags)


def decode_spz_v4(data: bytes, name: str = "SPZ data") -> SpzScene:
    """Raw parameters from a version 4 SPZ file: a 32-byte header, a table of contents and one
    zstd frame per attribute stream (needs the ``zstandard`` package)."""
    if len(data) < _HEADER_V4.size:
        raise DataError(f"{name}: too short for an SPZ header")
    magic, version, n, degree, frac_bits, flags, num_streams, toc = _HEADER_V4.unpack_from(data)
    if magic != MAGIC or version != 4:
        raise DataError(f"{name}: not an SPZ version 4 file (magic {magic:#x}, version {version})")
    if num_streams < 6 or len(data) < toc + 16 * num_streams:
        raise DataError(f"{name}: SPZ table of contents is truncated or lists {num_streams} streams (6 needed)")
    try:
        import zstandard
    except ImportError:
        raise DataError(f"{name}: SPZ version 4 needs the 'zstandard' package (pip install zstandard)") from None
    sizes = _stream_sizes(name, version, n, degree, frac_bits, len(data) * MAX_ZSTD_RATIO)
    offset = toc + 16 * num_streams
    streams, decompressor = [], zstandard.ZstdDecompressor()
    for index in range(num_streams):
        packed, unpacked = struct.unpack_from("<QQ", data, toc + 16 * index)
        if (index < 6 and unpacked != sizes[index]) or offset + packed > len(data):
            expected = f", {sizes[index]} expected" if index < 6 else ""
            raise DataError(f"{name}: SPZ stream {index} is {unpacked} bytes{expected}, or truncated")
        if index < 6:
            streams.append(unzstd_exact(decompressor, data[offset : offset + packed], unpacked,
                                        f"{name}: SPZ stream {index}"))
        offset += packed
    if offset != len(data):
        raise DataError(f"{name}: {len(data) - offset} trailing bytes after its {num_streams} SPZ streams")
    return _decode_streams(streams, version, n, degree, frac_bits, flags)


def _stream_sizes(name: str, version: int, n: int, degree: int, frac_bits: int, held: int) -> list:
    """Bytes of the positions, alphas, colours, scales, rotations and SH streams; refuses a
    header the format does not allow, streams larger than the ``held`` bytes the file can hold
    and a count whose decoding cannot fit in memory."""
    if degree > 3:
        raise DataError(f"{name}: SH degree {degree} is not supported (at most 3)")
    if frac_bits > 31:
        raise DataError(f"{name}: {frac_bits} fractional bits of fixed-point positions (at most 31)")
    sizes = [n * 9, n, n * 3, n * 3, n * (4 if version >= 3 else 3), n * _sh_dim(degree) * 3]
    if sum(sizes) > held:
        raise DataError(f"{name}: declares {n} Gaussians ({sum(sizes)} bytes), more than the file can hold ({held} bytes)")
    # the streams, the decoded float32 parameters and numpy's temporaries while decoding
    require_memory(f"{name}: {n} Gaussians", sum(sizes) + 4 * n * 4 * (14 + 3 * _sh_dim(degree)))
    return sizes


def _decode_streams(streams: list, version: int, n: int, degree: int, frac_bits: int, flags: int) -> SpzScene:
    pos_raw, alpha_raw, color_raw, scale_raw, rot_raw, sh_raw = (np.frombuffer(s, np.uint8) for s in streams)
    dim = _sh_dim(degree)
    b = pos_raw.reshape(n, 3, 3).astype(np.int32)
    fixed = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16)
    fixed = np.where(fixed & 0x800000, fixed - (1 << 24), fixed)
    means = fixed.astype(np.float32) / np.float32(1 << frac_bits)
    # The reference decoder's logit is infinite for alpha 0 and 255; clipping it keeps the
    # parameters trainable and changes sigmoid(opacity) by less than 1e-5.
    alpha = alpha_raw.astype(np.float32) / np.float32(255.0)
    with np.errstate(divide="ignore"):
        opacities = np.clip(np.log(alpha / (1.0 - alpha)), -_MAX_LOGIT, _MAX_LOGIT).astype(np.float32)
    sh0 = ((color_raw.reshape(n, 3).astype(np.float32) / 255.0) - 0.5) / np.float32(COLOR_SCALE)
    scales = scale_raw.reshape(n, 3).astype(np.float32) / 16.0 - 10.0
    if version >= 3:
        xyzw = _unpack_quaternions(rot_raw)
    else:
        xyz = rot_raw.reshape(n, 3).astype(np.float32) / 127.5 - 1.0
        xyzw = np.concatenate([xyz, np.sqrt(np.maximum(0.0, 1.0 - (xyz**2).sum(1, keepdims=True)))], axis=1)
    wxyz = np.concatenate([xyzw[:, 3:], xyzw[:, :3]], axis=1)
    shN = (sh_raw.reshape(n, dim, 3).astype(np.float32) - 128.0) / 128.0
    params = {
        "means": torch.from_numpy(np.ascontiguousarray(means, np.float32)),
        "scales": torch.from_numpy(np.ascontiguousarray(scales, np.float32)),
        "quats": torch.from_numpy(np.ascontiguousarray(wxyz, np.float32)),
        "opacities": torch.from_numpy(opacities),
        "sh0": torch.from_numpy(np.ascontiguousarray(sh0, np.float32)).reshape(n, 1, 3),
        "shN": torch.from_numpy(np.ascontiguousarray(shN, np.float32)),
    }
    return SpzScene(params, degree, bool(flags & FLAG_ANTIALIASED))


def read_spz(path: str | Path) -> SpzScene:
    """Read an SPZ file: gzip-compressed (versions 2 and 3) or version 4 (zstd streams).

    Nothing is inflated beyond what the header declares; a count the file cannot hold or memory
    cannot fit, a corrupt, short or overlong body and NaN or infinite values are refused."""
    path = Path(path)
    raw = path.read_bytes()
    if raw[:4] == b"NGSP":
        scene = decode_spz_v4(raw, str(path))
    else:
        if raw[:2] != b"\x1f\x8b":
            raise DataError(f"{path}: not a gzip-compressed SPZ file")

        def size_of(header: bytes) -> int:
            return _HEADER.size + sum(_v3_header(header, str(path), len(raw) * MAX_DEFLATE_RATIO)[-1])

        scene = decode_spz(gunzip_exact(raw, size_of, str(path), _HEADER.size), str(path))
    require_finite(scene.params, str(path))
    return scene
