"""Atomic file writes: write a temporary file beside the target, then rename."""

from __future__ import annotations

import errno
import io
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterator


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``path`` in one rename.

    A crash or exception while writing leaves ``path`` as it was (and no temp file). An OSError
    (full disk, read-only folder, a directory in the way) is raised again naming ``path``.
    """
    path = Path(path)
    try:
        with _naming(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except FileExistsError:  # a file where the folder should be
        raise NotADirectoryError(errno.ENOTDIR, "a file is in the way of the folder", str(path.parent)) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a file written normally follows the umask
    except (AttributeError, OSError):  # pragma: no cover - no fchmod (Windows)
        pass
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        with _naming(path):
            yield tmp_path
            with open(tmp_path, "rb+") as handle:
                os.fsync(handle.fileno())
            if path.is_dir():
                raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
            os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextmanager
def _naming(path: Path) -> Iterator[None]:
    """Re-raise an OSError that names no file (a failed ``write``) or names the temporary, naming ``path``."""
    try:
        yield
    except OSError as err:
        if err.filename is None or str(err.filename).endswith(".tmp"):
            raise type(err)(err.errno, err.strerror or str(err), str(path)) from None
        raise


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
    """``torch.save`` to ``path`` atomically (serialised in memory first, so a full disk is an
    OSError naming ``path``, not an error from inside torch's zip writer)."""
    import torch  # here: the other writes serve commands that never load PyTorch (``process``)

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write_bytes(path, lambda f: f.write(buffer.getbuffer()))


def atomic_link(source: str | Path, link: str | Path) -> None:
    """Make ``link`` a complete copy of ``source`` (hard link when possible), atomically."""
    with atomic_path(link) as tmp:
        tmp.unlink()
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
