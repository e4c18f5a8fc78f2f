"""One training process per run directory: a lock file holding the PID of the process that owns it.

Hand-written rather than ``filelock`` because the message must name the process holding the
lock, and a lock left by a killed process must be noticed and taken over. On POSIX the lock is
an ``flock`` on ``<run_dir>/.splattrain.lock`` (the kernel drops it when its process dies);
elsewhere the PID in the file is checked for a live process.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from datetime import datetime
from pathlib import Path
from typing import Callable, List, Optional

from ..errors import UserError

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".splattrain.lock"


class RunDirectoryError(UserError):
    """The run directory is in use by another process, or holds a run a fresh fit would mix with."""


class RunLock:
    """An exclusive lock on a run directory for the life of a ``fit``.

    Use :meth:`acquire` before anything in the directory changes and :meth:`release` at the end.
    """

    def __init__(self, run_dir: Path, what: str = "run directory") -> None:
        self.run_dir = Path(run_dir)
        self.what = what
        self.path = self.run_dir / LOCK_NAME
        self._fd: Optional[int] = None

    def acquire(self, info: Callable[[str], None] = lambda message: None) -> "RunLock":
        """Take the lock (creating the directory); RunDirectoryError names the PID holding it.

        A lock file left by a process that no longer runs is taken over (``info`` says so).
        """
        self.run_dir.mkdir(parents=True, exist_ok=True)
        while True:
            try:  # never through a symbolic link: the PID would be written into the file it points to
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK, 0o644)
            except OSError as err:
                if err.errno == errno.ELOOP or self.path.is_symlink():
                    raise RunDirectoryError(f"lock file '{self.path}' is a symbolic link, which splattrain never "
                                            "creates; remove it") from None
                raise
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise RunDirectoryError(f"lock file '{self.path}' is not a regular file; remove it")
            os.set_blocking(fd, True)
            previous = _read_pid(fd)
            if not _try_lock(fd, previous):
                os.close(fd)
                raise RunDirectoryError(
                    f"{self.what} '{self.run_dir}' is in use by process {previous or '(unknown)'} "
                    f"(lock file {self.path}); wait for it to end or choose another output_dir"
                )
            try:  # the file may have been removed and re-created by its previous owner meanwhile
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        if previous and previous != os.getpid():
            info(f"took over the lock of '{self.run_dir}' left by process {previous}, which no longer runs")
        return self

    def release(self) -> None:
        """Remove the lock file and drop the lock (no-op when not held)."""
        if self._fd is None:
            return
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        os.close(self._fd)  # closing drops the flock
        self._fd = None


class RunLocks:
    """The locks a run holds (its directory, and its checkpoint folder when that lies elsewhere)."""

    def __init__(self, locks: List[RunLock]) -> None:
        self.locks = locks

    def release(self) -> None:
        """Drop every lock, the last taken first."""
        for lock in reversed(self.locks):
            lock.release()


def _read_pid(fd: int) -> Optional[int]:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or 0) or None
    except (ValueError, OSError):
        return None


def _try_lock(fd: int, holder: Optional[int]) -> bool:
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
    return holder is None or holder == os.getpid() or not _alive(holder)  # pragma: no cover


def _alive(pid: int) -> bool:  # pragma: no cover - only without flock
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def move_run_aside(run_dir: Path) -> Path:
    """Move everything in ``run_dir`` but the lock file into a new sibling ``<name>.old-<time>``."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    target = run_dir.with_name(f"{run_dir.name}.old-{stamp}")
    suffix = 1
    while target.exists():
        suffix += 1
        target = run_dir.with_name(f"{run_dir.name}.old-{stamp}-{suffix}")
    target.mkdir(parents=True)
    for entry in run_dir.iterdir():
        if entry.name != LOCK_NAME:
            entry.rename(target / entry.name)
    return target


#: The temporaries of splattrain's atomic writes of run files: ``.<name>.<random>.tmp``.
STALE_TEMPORARY = re.compile(r"^\.(config\.yaml|results\.json|\.splattrain-run|(step_\d+|last|best|published)\.pt)"
                             r"\.[a-z0-9_]{6,8}\.tmp$")


def remove_stale_temporaries(*folders: Path) -> list[Path]:
    """Delete the temporaries of run files (:data:`STALE_TEMPORARY`) an atomic write left behind
    when its process died; other files, whatever their name, are left alone.

    Call it only while holding the run's lock: no other process can be writing them. A folder
    that is a symbolic link is left alone (the run refuses it).
    """
    removed = []
    for folder in folders:
        if folder.is_dir() and not folder.is_symlink():
            for stale in folder.glob(".*.tmp"):
                if STALE_TEMPORARY.match(stale.name) and stale.is_file() and not stale.is_symlink():
                    stale.unlink()
                    removed.append(stale)
    return removed
