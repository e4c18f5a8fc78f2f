"""Atomic file writes: write a temporary file beside the target, then rename."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterator

import torch


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``path`` in one rename.

    A crash or exception while writing leaves ``path`` as it was (and no temp file).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a file written normally follows the umask
    except (AttributeError, OSError):  # pragma: no cover - no fchmod (Windows)
        pass
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def _umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Call ``write(file)`` on a temporary binary file, then move it to ``path``."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        write(handle)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, lambda f: f.write(text.encode("utf-8")))


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` to ``path`` atomically."""
    atomic_write_bytes(path, lambda f: torch.save(obj, f))


def atomic_link(source: str | Path, link: str | Path) -> None:
    """Make ``link`` a complete copy of ``source`` (hard link when possible), atomically."""
    with atomic_path(link) as tmp:
        tmp.unlink()
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
