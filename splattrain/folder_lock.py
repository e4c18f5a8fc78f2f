"""One process per folder: a lock file, ``<folder>/.splattrain.lock``, holding its holder's PID.

On POSIX the lock is an ``flock`` on the file, which the kernel drops when its process dies, so
a file a killed process left is simply taken again. Where there is no ``flock`` (Windows), the PID
in the file is checked for a live process instead. The file is never opened through a symbolic
link (the PID would be written into the file it points to), and anything but a regular file is
refused. The refusals are typed (:class:`LockIsLink`, :class:`LockNotRegular`, :class:`LockHeld`):
each caller words them for its own folder.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Optional

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".splattrain.lock"

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO in the file's place must not block the open


class LockRefused(Exception):
    """The lock file ``path`` cannot be taken."""

    def __init__(self, path: Path) -> None:
        super().__init__(str(path))
        self.path = path


class LockIsLink(LockRefused):
    """The lock file is a symbolic link (never followed)."""


class LockNotRegular(LockRefused):
    """The lock file is a folder, a FIFO, a device or a socket."""


class LockHeld(LockRefused):
    """Another process holds the lock; ``pid`` is the PID its file records (None when unreadable)."""

    def __init__(self, path: Path, pid: Optional[int]) -> None:
        super().__init__(path)
        self.pid = pid

    @property
    def holder(self) -> str:
        """The holder's PID as text, ``(unknown)`` when the file records none."""
        return str(self.pid) if self.pid else "(unknown)"


class FolderLock:
    """The lock on ``folder`` for as long as this process holds it (:meth:`acquire`, :meth:`release`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self._fd: Optional[int] = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self) -> Optional[int]:
        """Take the lock (creating the folder) and record this process's PID in the file; returns
        the PID the file recorded before (a holder that died), None when none. Raises
        :class:`LockIsLink`, :class:`LockNotRegular` or :class:`LockHeld`."""
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:
            fd = _open(self.path, os.O_RDWR | os.O_CREAT)
            if _NONBLOCK:
                os.set_blocking(fd, True)
            if not _try_lock(fd):
                held = LockHeld(self.path, _read_pid(fd))
                os.close(fd)
                raise held
            if _same_file(fd, self.path):  # not removed and made again by its last holder meanwhile
                break
            os.close(fd)
        previous = _read_pid(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return previous

    def release(self) -> None:
        """Remove the lock file, then drop the lock (no-op when not held)."""
        if self._fd is None:
            return
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        os.close(self._fd)  # closing drops the flock
        self._fd = None


def raise_if_held(folder: Path) -> None:
    """:class:`LockHeld` when another process holds ``folder``'s lock. Reads only: makes no file
    or folder and takes nothing; a missing lock file, a link or anything but a regular file is
    left for :meth:`FolderLock.acquire` to refuse."""
    path = Path(folder) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
    except OSError:
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LockHeld(path, _read_pid(fd)) from None
        else:  # pragma: no cover - without flock
            pid = _read_pid(fd)
            if pid is not None and pid != os.getpid() and _alive(pid):
                raise LockHeld(path, pid)
    finally:
        os.close(fd)


def _open(path: Path, flags: int) -> int:
    """``path`` opened without following a link; refused when a link or not a regular file."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP or path.is_symlink():
            raise LockIsLink(path) from None
        if err.errno == errno.EISDIR:
            raise LockNotRegular(path) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LockNotRegular(path)
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
    except FileNotFoundError:
        return False


def _read_pid(fd: int) -> Optional[int]:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or 0) or None
    except (ValueError, OSError):
        return None


def _try_lock(fd: int) -> bool:
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
    holder = _read_pid(fd)  # pragma: no cover - without flock
    return holder is None or holder == os.getpid() or not _alive(holder)  # pragma: no cover


def _alive(pid: int) -> bool:  # pragma: no cover - only without flock
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
