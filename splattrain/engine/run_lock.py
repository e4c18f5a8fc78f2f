"""One training process per run directory: the folder lock of :mod:`splattrain.folder_lock` (an
``flock`` on ``<run_dir>/.splattrain.lock`` holding its holder's PID), with the run's own refusals;
moving a run aside and removing the temporaries a killed run left.

Hand-written rather than ``filelock`` because the message must name the process holding the
lock, and a lock left by a killed process must be noticed and taken over.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path
from typing import Callable, List

from ..errors import UserError
from ..folder_lock import LOCK_NAME, FolderLock, LockHeld, LockIsLink, LockNotRegular


class RunDirectoryError(UserError):
    """The run directory is in use by another process, or holds a run a fresh fit would mix with."""


class RunLock:
    """An exclusive lock on a run directory for the life of a ``fit``.

    Use :meth:`acquire` before anything in the directory changes and :meth:`release` at the end.
    """

    def __init__(self, run_dir: Path, what: str = "run directory") -> None:
        self.run_dir = Path(run_dir)
        self.what = what
        self._lock = FolderLock(self.run_dir)
        self.path = self._lock.path

    def acquire(self, info: Callable[[str], None] = lambda message: None) -> "RunLock":
        """Take the lock (creating the directory); RunDirectoryError names the PID holding it.

        A lock file left by a process that no longer runs is taken over (``info`` says so).
        """
        try:
            previous = self._lock.acquire()
        except LockIsLink:
            raise RunDirectoryError(f"lock file '{self.path}' is a symbolic link, which splattrain never "
                                    "creates; remove it") from None
        except LockNotRegular:
            raise RunDirectoryError(f"lock file '{self.path}' is not a regular file; remove it") from None
        except LockHeld as held:
            raise RunDirectoryError(
                f"{self.what} '{self.run_dir}' is in use by process {held.holder} "
                f"(lock file {self.path}); wait for it to end or choose another output_dir"
            ) from None
        if previous and previous != os.getpid():
            info(f"took over the lock of '{self.run_dir}' left by process {previous}, which no longer runs")
        return self

    def release(self) -> None:
        """Remove the lock file and drop the lock (no-op when not held)."""
        self._lock.release()


class RunLocks:
    """The locks a run holds (its directory, and its checkpoint folder when that lies elsewhere)."""

    def __init__(self, locks: List[RunLock]) -> None:
        self.locks = locks

    def release(self) -> None:
        """Drop every lock, the last taken first."""
        for lock in reversed(self.locks):
            lock.release()


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
