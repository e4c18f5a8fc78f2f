"""Checkpoint files: written checksummed and atomically, read without running code, found in a
run's checkpoint folder, and their configs compared with a run's."""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from ..errors import CheckpointError
from ..io.atomic import atomic_torch_save
from ..io.torch_zip import check_torch_zip
from ..nested import walk_nested

FORMAT = "splattrain-checkpoint/2"  # the payload is a uint8 tensor (in /1, bytes: pickled 50% larger and 20x slower)
READ_FORMATS = ("splattrain-checkpoint/1", FORMAT)
#: Keys every checkpoint holds (enough to evaluate, render and export), and those a resume also needs.
SCENE_KEYS = ("step", "config", "sh_degree", "gaussians")
RESUME_KEYS = SCENE_KEYS + ("optimizers", "strategy_state", "data", "rng")
_UNSAFE_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")
_STEP_FILE = re.compile(r"^step_(\d+)\.pt$")

#: Config keys a resumed run must share with its checkpoint (they change the scene or the model).
INCOMPATIBLE_KEYS = (
    "data.type", "data.path", "data.downscale", "data.test_split", "data.test_every", "data.test_images",
    "data.normalize", "data.masks", "data.depths", "data.val_split", "model.sh_degree", "strategy.type",
)


def save_checkpoint_file(state: Dict[str, Any], path: str | Path) -> None:
    """Write ``state`` to ``path`` atomically, wrapped with a SHA-256 of its bytes."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getbuffer()
    atomic_torch_save({"format": FORMAT, "sha256": hashlib.sha256(payload).hexdigest(),
                       "payload": torch.frombuffer(payload, dtype=torch.uint8)}, path)


def _safe_load(source: Any, path: Path, what: str, mmap: bool = False) -> Any:
    """``torch.load(weights_only=True)``: tensors, numbers, strings, lists, tuples and dicts only,
    so loading never runs code; anything else is refused naming the object it would have built.
    With ``mmap`` (a file) tensors stay in the file until read."""
    try:
        return torch.load(source, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:
        unsafe = _UNSAFE_GLOBAL.search(str(err))
        if unsafe:
            raise CheckpointError(
                f"checkpoint '{path}' {what} holds '{unsafe.group(1)}', which splattrain does not load "
                "(a checkpoint may hold only tensors, numbers, strings, lists and dicts, so loading it "
                "never runs code); it was written by splattrain 0.1.0 or is not a splattrain checkpoint"
            ) from None
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        unpickler = [line.split("error:", 1)[1].strip() for line in lines if line.startswith("WeightsUnpickler error:")]
        reason = (unpickler or [line for line in lines if "weights_only" not in line] or [type(err).__name__])[0]
        raise CheckpointError(f"checkpoint '{path}' is truncated or corrupted ({reason[:200]})") from None


_MARKER = FORMAT.rsplit("/", 1)[0].encode("ascii")
_HEADER_START = 1 << 12  # the format entry comes first in the header pickle


def _check_zip(source: Any, size: int, path: Path, what: str, header: bool) -> bool:
    """Before torch materialises anything: a torch zip's members are stored uncompressed (as
    torch writes them) and fit in its ``size`` bytes, so loading needs no more memory than the
    file; the ``header`` pickle names the checkpoint format in its first bytes. False when
    ``source`` is no zip archive (torch's legacy format)."""
    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, ValueError):
        return False  # not a zip: torch.load reports it
    with archive:
        check_torch_zip(archive, size, f"checkpoint '{path}' {what}",
                        "splattrain writes stored members only; it is not a splattrain checkpoint")
        if header:
            pickles = [m for m in archive.infolist() if m.filename.endswith("/data.pkl")]
            if len(pickles) != 1 or _MARKER not in archive.open(pickles[0]).read(_HEADER_START):
                raise CheckpointError(f"'{path}' is not a splattrain checkpoint (no '{FORMAT}' header)")
    return True


def has_checkpoint_header(path: Path) -> bool:
    """Whether ``path`` is a regular file whose zip directory and first bytes are a splattrain
    checkpoint's (nothing is unpickled)."""
    try:
        return (path.is_file() and not path.is_symlink()
                and _check_zip(path, path.stat().st_size, path, "header", header=True))
    except (CheckpointError, OSError, RuntimeError, EOFError):
        return False


def load_checkpoint_file(path: str | Path) -> Dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint_file`, verifying its checksum.

    Everything is loaded with ``torch.load(weights_only=True)``: a crafted file cannot run code.
    Raises CheckpointError naming the file when it is missing, truncated, corrupted, not a
    splattrain checkpoint, or holds anything but plain data.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' not found")
    zipped = _check_zip(path, path.stat().st_size, path, "header", header=True)
    wrapper = _safe_load(path, path, "header", mmap=zipped)  # the payload stays in the file while it is hashed
    if not isinstance(wrapper, dict) or wrapper.get("format") not in READ_FORMATS:
        raise CheckpointError(f"'{path}' is not a splattrain checkpoint (no '{FORMAT}' header)")
    payload = wrapper.get("payload")
    if isinstance(payload, torch.Tensor):
        if not (payload.dtype == torch.uint8 and payload.dim() == 1 and payload.layout == torch.strided
                and payload.is_contiguous() and payload.untyped_storage().nbytes() == payload.numel()):
            raise CheckpointError(f"checkpoint '{path}' is corrupted (its payload is not one string of bytes)")
        payload = payload.numpy()  # hashed and read in place
    if not isinstance(payload, (bytes, np.ndarray)) or hashlib.sha256(payload).hexdigest() != wrapper.get("sha256"):
        raise CheckpointError(f"checkpoint '{path}' is corrupted (checksum mismatch)")
    _check_zip(io.BytesIO(payload), len(payload), path, "payload", header=False)
    state = _safe_load(io.BytesIO(payload), path, "payload")
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint '{path}' holds no state dict")
    _check_tensor_sizes(state, len(payload), path)
    return state


def _check_tensor_sizes(state: Dict[str, Any], payload_bytes: int, path: Path) -> None:
    """A state every later walk can finish: no list or dict that contains itself, at most
    :data:`~splattrain.nested.MAX_ENTRIES` entries, nested at most ``MAX_DEPTH`` deep. And every
    tensor holds its own elements: a tensor whose elements repeat its storage (a zero stride,
    overlapping views) would take far more memory than the file once anything reads it. Together
    the tensors take at most twice the payload (two entries may share a storage)."""
    total = 0
    for entry, value in walk_nested(state, "state", lambda problem: CheckpointError(
            f"checkpoint '{path}': {problem}; it is not a splattrain checkpoint")):
        if isinstance(value, torch.Tensor):
            if value.layout != torch.strided:
                raise CheckpointError(f"checkpoint '{path}': {entry[6:]} is a {value.layout} tensor, not a dense one")
            if value.device.type == "meta":
                raise CheckpointError(f"checkpoint '{path}': {entry[6:]} is a tensor without data (device meta)")
            size, stored = value.numel() * value.element_size(), value.untyped_storage().nbytes()
            if size > stored - value.storage_offset() * value.element_size():
                raise CheckpointError(f"checkpoint '{path}': {entry[6:]} of shape {list(value.shape)} repeats the "
                                      f"{stored} bytes it holds; it is not a splattrain checkpoint")
            total += size
    if total > 2 * payload_bytes:
        raise CheckpointError(f"checkpoint '{path}': its tensors take {total} bytes from a {payload_bytes}-byte "
                              "payload (views repeating the same data); it is not a splattrain checkpoint")


def require_keys(checkpoint: Mapping[str, Any], path: str | Path, keys: Sequence[str], purpose: str) -> None:
    """Refuse a checkpoint lacking any of ``keys`` (CheckpointError naming the file and the keys)."""
    missing = [key for key in keys if key not in checkpoint]
    if missing:
        raise CheckpointError(f"checkpoint '{path}' lacks {', '.join(missing)}; it cannot be used to {purpose}")


def step_checkpoints(ckpt_dir: Path) -> List[Path]:
    """``step_XXXXXX.pt`` files in ``ckpt_dir``, newest step first."""
    if not ckpt_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in ckpt_dir.iterdir() if (m := _STEP_FILE.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def find_resume_checkpoint(ckpt_dir: Path, warn: Callable[[str], None]) -> Tuple[Path, Dict[str, Any]]:
    """The newest intact checkpoint in ``ckpt_dir`` (last.pt, then step files newest first).

    Corrupted candidates are skipped with a warning naming them.
    """
    candidates = [ckpt_dir / "last.pt"] if (ckpt_dir / "last.pt").is_file() else []
    candidates += step_checkpoints(ckpt_dir)
    if not candidates:
        raise CheckpointError(f"--resume: no checkpoint in '{ckpt_dir}'")
    for path in candidates:
        try:
            return path, load_checkpoint_file(path)
        except CheckpointError as err:
            warn(f"{err}; trying an older checkpoint")
    raise CheckpointError(f"--resume: every checkpoint in '{ckpt_dir}' is truncated or corrupted")


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    flat: Dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _same(key: str, old: Any, new: Any) -> bool:
    if key == "data.path" and old is not None and new is not None:
        return Path(str(old)).resolve() == Path(str(new)).resolve()
    return old == new


def config_changes(saved: Mapping[str, Any], current: Mapping[str, Any]) -> Tuple[List[str], List[str]]:
    """(incompatible, compatible) differences between a checkpoint's config and the run's.

    Each entry reads ``key: old -> new``.
    """
    old, new = _flatten(saved), _flatten(current)
    incompatible, compatible = [], []
    for key in sorted(set(old) | set(new)):
        if _same(key, old.get(key), new.get(key)):
            continue
        line = f"{key}: {old.get(key)!r} -> {new.get(key)!r}"
        (incompatible if key in INCOMPATIBLE_KEYS else compatible).append(line)
    return incompatible, compatible


def checkpoint_target(target: str | Path, checkpoint_dir: Optional[Path] = None) -> Path:
    """A checkpoint file from a run directory (its ``checkpoint_dir``, default ckpt/: last.pt, else
    the newest) or a file path."""
    path = Path(target)
    if path.is_dir():
        ckpt_dir = checkpoint_dir if checkpoint_dir is not None else path / "ckpt"
        for candidate in [ckpt_dir / "last.pt", *step_checkpoints(ckpt_dir), ckpt_dir / "published.pt"]:
            if candidate.is_file():
                return candidate
        raise CheckpointError(f"'{path}' has no checkpoint in {ckpt_dir}")
    if not path.is_file():
        raise CheckpointError(f"'{path}' is neither a run directory nor a checkpoint file")
    return path

