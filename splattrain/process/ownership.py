"""What ``process`` left in its work folder ``colmap/``, proved by sizes and hashes.

When a run ends (done, stopped or failed) the marker records every folder and file under
``colmap/``, each file with its size and SHA-256. The next run checks them before any stage
touches them: an entry the marker does not list, a file that changed since, a symbolic link or
anything that is not a plain file or folder is moved into the run's ``<OUTPUT>.old-<time>/colmap/``
(where a replaced scene goes too), never deleted. What the stages then remove or rewrite
(``sparse/``, ``scene/``, ``undistorted/``, the database, the frames) is only ever process's own.

A file moves aside with the folder it lies in (a model ``sparse/N`` stays whole; a video's
frames stay with their manifest), one directly in ``colmap/`` on its own, and the database with
its ``-wal`` and ``-shm`` files. A run that was killed (SIGKILL, power loss) records nothing:
the next one moves what changed since the last record aside and starts those stages afresh.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from pathlib import Path
from typing import List, Optional, Tuple

from .inputs import MAX_DEPTH
from .tree import walk
from .workspace import WORK, OutputFolderError, Workspace

#: Entries of the work folder checked at most (a video's frames and COLMAP's files).
MAX_WORK_ENTRIES = 100_000
#: Folders nest no deeper in the work folder (the staged scene's ``images/`` holds the input's tree).
MAX_WORK_DEPTH = MAX_DEPTH + 4
DATABASE = f"{WORK}/database.db"
#: Files that move aside together: the database and SQLite's files beside it.
_DATABASE_FILES = (DATABASE, f"{DATABASE}-wal", f"{DATABASE}-shm")


def _digest(space: Workspace, path: str, entry: os.DirEntry) -> str:
    """SHA-256 of the work file ``path`` (relative to the output folder), computed once per
    (size, modification time, inode) in a run."""
    info = entry.stat(follow_symlinks=False)
    key = (path, info.st_size, info.st_mtime_ns, info.st_ino)
    if key not in space.digests:
        with open(entry.path, "rb") as handle:
            space.digests[key] = hashlib.file_digest(handle, "sha256").hexdigest()
    return space.digests[key]


def _unchanged(space: Workspace, path: str, entry: os.DirEntry) -> bool:
    """Whether ``entry`` is a plain file the marker lists with this size and hash."""
    listed = space.marker.files.get(path)
    if listed is None or not entry.is_file(follow_symlinks=False):
        return False
    return entry.stat(follow_symlinks=False).st_size == listed[0] and _digest(space, path, entry) == listed[1]


def _unit(path: str) -> List[str]:
    """What moves aside with the file ``path``: its folder, or itself (the database: its files)."""
    if path in _DATABASE_FILES:
        return list(_DATABASE_FILES)
    folder = posixpath.dirname(path)
    return [folder] if folder != WORK else [path]


def _outermost(paths: List[str]) -> List[str]:
    """``paths`` without those inside another of them, sorted."""
    kept: List[str] = []
    for path in sorted(set(paths)):
        if not any(path.startswith(f"{parent}/") for parent in kept):
            kept.append(path)
    return kept


def foreign_entries(space: Workspace) -> List[str]:
    """The work folder's entries (paths relative to the output folder) that process did not
    leave there as they are: not listed by the marker, changed since, links, special files."""
    listed = set(space.marker.folders)
    moving: List[str] = []

    def own(rel: str, depth: int) -> bool:  # a folder process made: entered; any other: moved whole
        return f"{WORK}/{rel}" in listed and depth <= MAX_WORK_DEPTH

    for seen, (rel, entry, depth) in enumerate(walk(space.work, own), 1):
        if seen > MAX_WORK_ENTRIES:
            raise OutputFolderError(f"{space.work}: holds more than {MAX_WORK_ENTRIES} entries; "
                                    "splattrain process never writes that many")
        path = f"{WORK}/{rel}"
        if entry.is_dir(follow_symlinks=False):
            if not own(rel, depth):
                moving.append(path)
        elif not _unchanged(space, path, entry):
            moving += _unit(path)
    return _outermost(moving)


def keep_only_own(space: Workspace) -> Tuple[List[str], Optional[Path]]:
    """Move every entry of :func:`foreign_entries` into the run's ``<out>.old-<time>`` folder
    (same relative path); returns (the paths moved, the folder they went to: None when none)."""
    moved = []
    for path in foreign_entries(space):
        source = space.out / path
        if not source.exists() and not source.is_symlink():  # the database's -wal or -shm: absent
            continue
        target = space.aside() / path
        target.parent.mkdir(parents=True, exist_ok=True)
        source.rename(target)
        moved.append(path)
    return moved, space.aside() / WORK if moved else None


def record_work(space: Workspace) -> None:
    """Write into the marker every folder and plain file now in the work folder, each file with
    its size and SHA-256 (links and special files are left out: the next run moves them aside)."""
    if not space.work.is_dir() or space.work.is_symlink():
        return
    folders, files = [], {}
    for rel, entry, _ in walk(space.work):
        path = f"{WORK}/{rel}"
        if entry.is_dir(follow_symlinks=False):
            folders.append(path)
        elif entry.is_file(follow_symlinks=False):
            files[path] = [entry.stat(follow_symlinks=False).st_size, _digest(space, path, entry)]
    space.marker.folders, space.marker.files = folders, files
    space.write_marker()
