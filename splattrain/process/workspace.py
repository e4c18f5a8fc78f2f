"""The output folder of ``splattrain process``: what it may write, and proof of what it wrote.

``process`` writes only into an empty (or new) folder, or one holding its marker file
``.splattrain-process``: JSON naming the format and every entry ``process`` created there
(``colmap``, ``images``, ``sparse``, ``images_2/4/8``). Only those entries are ever replaced, and a
replaced scene is moved aside into a sibling ``<OUTPUT>.old-<time>`` folder, never deleted; other
files a user put beside them are left alone. Symbolic links are never written through: the
output folder, the entries it writes and anything inside its work folder ``colmap/`` may not be
links. The input may not lie inside the output (it would be replaced), nor the output inside
the input (its photos would be read as input).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Iterable, List

from ..errors import UserError
from ..io.atomic import atomic_write_text

MARKER = ".splattrain-process"
FORMAT = "splattrain-process/1"
#: The work folder (database, models, video frames, COLMAP's log, summary).
WORK = "colmap"
#: Entries a marker may name: the work folder and the scene's folders.
OWNED = (WORK, "images", "sparse", "images_2", "images_4", "images_8")
_MAX_MARKER_BYTES = 4096
#: Entries of the work folder checked for links at most (a video's frames and COLMAP's files).
_MAX_WORK_ENTRIES = 100_000


class OutputFolderError(UserError):
    """The output folder cannot be used without risking files ``process`` did not write."""


@dataclass
class Workspace:
    """An output folder ``process`` may write: ``created`` lists the entries it made there."""

    out: Path
    created: List[str] = field(default_factory=list)

    @property
    def work(self) -> Path:
        return self.out / WORK

    def record(self, *names: str) -> None:
        """Add ``names`` to what the marker says this folder's ``process`` runs created."""
        added = [name for name in names if name not in self.created]
        if added:
            self.created += added
            self.write_marker()

    def write_marker(self) -> None:
        atomic_write_text(self.out / MARKER, json.dumps({"format": FORMAT, "created": self.created}) + "\n")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


def check_paths(src: Path, out: Path) -> None:
    """Refuse an output folder that is a link or a file, and input and output inside one another
    (compared with every link resolved)."""
    if out.is_symlink():
        raise OutputFolderError(f"{out}: the output folder is a symbolic link; give the folder it points to")
    if out.exists() and not out.is_dir():
        raise OutputFolderError(f"{out}: output exists and is not a folder")
    real_src, real_out = src.resolve(), out.resolve()
    if _inside(real_src, real_out):
        raise OutputFolderError(f"{src}: the input is inside the output folder {out}, whose scene process replaces; "
                                "copy the photos elsewhere, or give another output folder")
    if src.is_dir() and _inside(real_out, real_src):
        raise OutputFolderError(f"{out}: output folder is inside the input folder {src}; put it elsewhere")


def read_marker(out: Path) -> List[str] | None:
    """The entries the marker in ``out`` names (None without a marker); OutputFolderError for a
    marker that is not process's (a link, not its JSON, names outside :data:`OWNED`)."""
    marker = out / MARKER
    if not marker.exists() and not marker.is_symlink():
        return None
    try:
        if marker.is_symlink() or not marker.is_file() or marker.stat().st_size > _MAX_MARKER_BYTES:
            raise ValueError
        data = json.loads(marker.read_text(encoding="utf-8"))
        created = data["created"]
        if data.get("format") != FORMAT or not isinstance(created, list) or not set(created) <= set(OWNED):
            raise ValueError
    except (ValueError, KeyError, TypeError, OSError, UnicodeDecodeError):
        raise OutputFolderError(f"{marker}: not a marker splattrain process wrote; give another output folder") from None
    return list(created)


def claim(src: Path, out: Path) -> Workspace:
    """The output folder as a :class:`Workspace` (created and marked when new or empty), with its
    work folder; OutputFolderError when it holds files process did not write, or links."""
    check_paths(src, out)
    created = read_marker(out) if out.is_dir() else None
    if created is None:
        if out.is_dir() and any(out.iterdir()):
            raise OutputFolderError(f"{out}: output folder is not empty and was not written by splattrain process; "
                                    "give a new or empty folder")
        out.mkdir(parents=True, exist_ok=True)
        space = Workspace(out)
        space.write_marker()
    else:
        space = Workspace(out, created)
    for name in OWNED:
        path = out / name
        if path.is_symlink():
            raise OutputFolderError(f"{path}: a symbolic link, which splattrain process never creates; remove it")
        if path.exists() and name not in space.created:
            raise OutputFolderError(f"{path}: not written by splattrain process, which would replace it; "
                                    "move it away or give another output folder")
    if not space.work.exists():
        space.work.mkdir()
        space.record(WORK)
    _refuse_links(space.work)
    return space


def _refuse_links(folder: Path) -> None:
    """Refuse a symbolic link anywhere in ``folder`` (listed, never followed)."""
    seen = 0
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            seen += 1
            path = Path(parent) / name
            if path.is_symlink():
                raise OutputFolderError(f"{path}: a symbolic link, which splattrain process never creates; remove it")
            if seen > _MAX_WORK_ENTRIES:
                raise OutputFolderError(f"{folder}: holds more than {_MAX_WORK_ENTRIES} entries; "
                                        "splattrain process never writes that many")


def publish(space: Workspace, staged: Path, names: Iterable[str]) -> Path | None:
    """Move the scene folders ``names`` from ``staged`` into the output folder; the ones they
    replace (process's own, from an earlier run) go into a new sibling ``<out>.old-<time>``
    folder, returned (None when nothing was replaced)."""
    names = list(names)
    replaced = [name for name in names if (space.out / name).exists()]
    aside = None
    if replaced:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        aside = space.out.with_name(f"{space.out.name}.old-{stamp}")
        suffix = 1
        while aside.exists():
            suffix += 1
            aside = space.out.with_name(f"{space.out.name}.old-{stamp}-{suffix}")
        aside.mkdir()
        for name in replaced:
            if name not in space.created or (space.out / name).is_symlink():  # checked when claimed; checked again
                raise OutputFolderError(f"{space.out / name}: not written by splattrain process; left as it is")
            (space.out / name).rename(aside / name)
    for name in names:
        (staged / name).rename(space.out / name)
    space.record(*names)
    return aside
