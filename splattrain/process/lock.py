"""One ``splattrain process`` per output folder: an ``flock`` on ``<OUTPUT>/.splattrain.lock``.

The kernel drops the lock when its process dies, so a lock file a killed run left is simply
taken again (where there is no ``flock``, on Windows, nothing is locked). The file holds the
PID of its holder, which the refusal names. Written here rather than reusing the trainer's run
lock, whose package imports the whole engine.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Optional

from .workspace import OutputFolderError

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".splattrain.lock"


def _in_use(out: Path, fd: int) -> OutputFolderError:
    holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "(unknown)"
    return OutputFolderError(f"{out}: output folder in use by process {holder}, another splattrain process "
                             f"(lock file {LOCK_NAME}); wait for it to end or give another output folder")


def refuse_if_held(out: Path) -> None:
    """OutputFolderError when another process holds ``out``'s lock; reads only (makes nothing), so
    it can come before the checks of what the folder holds, which a running process is changing."""
    if fcntl is None:  # pragma: no cover - Windows: no lock
        return
    try:
        fd = os.open(out / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return  # no lock file (or a link, which acquire names)
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _in_use(out, fd) from None
    finally:
        os.close(fd)


class OutputLock:
    """The output folder's lock for the life of a run (:meth:`acquire`, then :meth:`release`)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.path = out / LOCK_NAME
        self._fd: Optional[int] = None

    def acquire(self) -> "OutputLock":
        """Take the lock (creating the folder); OutputFolderError naming the folder and the process
        holding it, or a lock file that is a link or not a file."""
        self.out.mkdir(parents=True, exist_ok=True)
        while True:
            try:  # never through a symbolic link
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
            except OSError as err:
                if err.errno == errno.ELOOP or self.path.is_symlink():
                    raise OutputFolderError(f"{self.path}: a symbolic link, which splattrain never creates; "
                                            "remove it") from None
                raise
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise OutputFolderError(f"{self.path}: not a regular file; remove it")
            os.set_blocking(fd, True)
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                error = _in_use(self.out, fd)
                os.close(fd)
                raise error from None
            if self._same_file(fd):  # not removed and made again by its last holder meanwhile
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def _same_file(self, fd: int) -> bool:
        try:
            return os.path.samestat(os.fstat(fd), os.stat(self.path, follow_symlinks=False))
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Remove the lock file and drop the lock (no-op when not held)."""
        if self._fd is None:
            return
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None
