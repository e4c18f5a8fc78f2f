"""One ``splattrain process`` per output folder: the folder lock of :mod:`splattrain.folder_lock`
(an ``flock`` on ``<OUTPUT>/.splattrain.lock`` holding its holder's PID), with the output folder's
own refusals.

The kernel drops the lock when its process dies, so a lock file a killed run left is simply
taken again. The refusal names the PID of the holder.
"""

from __future__ import annotations

from pathlib import Path

from ..folder_lock import LOCK_NAME, FolderLock, LockHeld, LockIsLink, LockNotRegular, raise_if_held
from .workspace import OutputFolderError


def _in_use(out: Path, held: LockHeld) -> OutputFolderError:
    return OutputFolderError(f"{out}: output folder in use by process {held.holder}, another splattrain process "
                             f"(lock file {LOCK_NAME}); wait for it to end or give another output folder")


def refuse_if_held(out: Path) -> None:
    """OutputFolderError when another process holds ``out``'s lock; reads only (makes nothing), so
    it can come before the checks of what the folder holds, which a running process is changing."""
    try:
        raise_if_held(out)
    except LockHeld as held:
        raise _in_use(out, held) from None


class OutputLock:
    """The output folder's lock for the life of a run (:meth:`acquire`, then :meth:`release`)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self._lock = FolderLock(out)
        self.path = self._lock.path

    def acquire(self) -> "OutputLock":
        """Take the lock (creating the folder); OutputFolderError naming the folder and the process
        holding it, or a lock file that is a link or not a file."""
        try:
            self._lock.acquire()
        except LockIsLink:
            raise OutputFolderError(f"{self.path}: a symbolic link, which splattrain never creates; "
                                    "remove it") from None
        except LockNotRegular:
            raise OutputFolderError(f"{self.path}: not a regular file; remove it") from None
        except LockHeld as held:
            raise _in_use(self.out, held) from None
        return self

    def release(self) -> None:
        """Remove the lock file and drop the lock (no-op when not held)."""
        self._lock.release()
