"""The output folder of ``splattrain process``: what it may write, and proof of what it wrote.

``process`` writes only into an empty (or new) folder, or one holding its marker file
``.splattrain-process``: JSON naming the format, every entry ``process`` created there
(``colmap``, ``images``, ``sparse``, ``images_2/4/8``) and every folder and file it left in its
work folder ``colmap/``, each file with its size and SHA-256 (:mod:`.ownership` checks them).
Only those entries are ever replaced, and a replaced scene is moved aside into a sibling
``<OUTPUT>.old-<time>`` folder, never deleted; other files a user put beside them are left
alone. Symbolic links are never written through: the output folder and the entries it writes
may not be links. The input may not lie inside the output (it would be replaced), nor the
output inside the input (its photos would be read as input); ``.`` and ``..`` are resolved first.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ..errors import UserError
from ..io.atomic import atomic_write_text

MARKER = ".splattrain-process"
FORMAT = "splattrain-process/2"
#: The marker of earlier versions, which listed no work files: everything in ``colmap/`` is then
#: taken for someone else's and moved aside.
FORMAT_1 = "splattrain-process/1"
#: The work folder (database, models, video frames, COLMAP's log, summary).
WORK = "colmap"
#: Entries a marker may name: the work folder and the scene's folders.
OWNED = (WORK, "images", "sparse", "images_2", "images_4", "images_8")
#: A marker lists every work file (a long video's frames): a few MB at most.
_MAX_MARKER_BYTES = 32 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
#: The temporary of an atomic write of the marker (a run that is writing it, or was killed then).
_MARKER_TEMPORARY = re.compile(rf"^\.{re.escape(MARKER)}\.[a-z0-9_]+\.tmp$")


class OutputFolderError(UserError):
    """The output folder cannot be used without risking files ``process`` did not write."""


@dataclass
class Marker:
    """What a marker says: the entries process created in the output folder, and the folders and
    files (path relative to the output folder -> [size, SHA-256]) it left in ``colmap/``."""

    created: List[str]
    folders: List[str] = field(default_factory=list)
    files: Dict[str, List[Any]] = field(default_factory=dict)


@dataclass
class Workspace:
    """An output folder ``process`` may write: ``marker`` says what it made there; ``digests``
    holds the SHA-256 of work files checked this run, by (path, size, mtime, inode)."""

    out: Path
    marker: Marker = field(default_factory=lambda: Marker([]))
    digests: Dict[Tuple[str, int, int, int], str] = field(default_factory=dict)
    _aside: Optional[Path] = None

    @property
    def work(self) -> Path:
        return self.out / WORK

    @property
    def created(self) -> List[str]:
        return self.marker.created

    def record(self, *names: str) -> None:
        """Add ``names`` to what the marker says this folder's ``process`` runs created."""
        added = [name for name in names if name not in self.marker.created]
        if added:
            self.marker.created += added
            self.write_marker()

    def write_marker(self) -> None:
        atomic_write_text(self.out / MARKER, json.dumps({"format": FORMAT, "created": self.marker.created,
                                                         "folders": self.marker.folders,
                                                         "files": self.marker.files}) + "\n")

    def aside(self) -> Path:
        """This run's new sibling folder ``<out>.old-<time>`` for what it moves aside (made once)."""
        if self._aside is None:
            stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
            aside, suffix = self.out.with_name(f"{self.out.name}.old-{stamp}"), 1
            while aside.exists() or aside.is_symlink():
                suffix += 1
                aside = self.out.with_name(f"{self.out.name}.old-{stamp}-{suffix}")
            aside.mkdir()
            self._aside = aside
        return self._aside


def output_folder(given: str) -> Path:
    """The output folder named by ``given``: as given, but ``.``, ``..`` and paths through
    ``..`` become the absolute folder they name (its name makes ``<name>.old-<time>``);
    OutputFolderError for the root folder."""
    path = Path(given)
    if path.name in ("", "..") or ".." in path.parts:
        absolute = path.absolute()
        path = absolute.resolve() if absolute.name == ".." else absolute.parent.resolve() / absolute.name
    if not path.name:
        raise OutputFolderError(f"{given}: the output folder may not be the file system's root; give a folder in it")
    return path


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


def _work_path(value: Any) -> bool:
    """Whether ``value`` is a path a marker may list: inside ``colmap/``, no ``.``/``..``/empty part."""
    if not isinstance(value, str):
        return False
    parts = value.split("/")
    return len(parts) > 1 and parts[0] == WORK and all(part not in ("", ".", "..") for part in parts) \
        and PurePosixPath(value).as_posix() == value


def _parse_marker(data: Any) -> Marker:
    """The :class:`Marker` in ``data`` (a marker's JSON); ValueError when it is not one."""
    created = data["created"]
    if data.get("format") not in (FORMAT, FORMAT_1) or not isinstance(created, list) or not set(created) <= set(OWNED):
        raise ValueError
    if data["format"] == FORMAT_1:
        return Marker(list(created))
    folders, files = data["folders"], data["files"]
    if not isinstance(folders, list) or not all(_work_path(path) for path in folders) or not isinstance(files, dict):
        raise ValueError
    for path, entry in files.items():
        if not (_work_path(path) and isinstance(entry, list) and len(entry) == 2 and type(entry[0]) is int
                and entry[0] >= 0 and isinstance(entry[1], str) and _SHA256.match(entry[1])):
            raise ValueError
    return Marker(list(created), list(folders), dict(files))


def read_marker(out: Path) -> Marker | None:
    """What the marker in ``out`` says (None without a marker); OutputFolderError for a marker
    that is not process's (a link, not its JSON, names outside :data:`OWNED` or ``colmap/``)."""
    marker = out / MARKER
    if not marker.exists() and not marker.is_symlink():
        return None
    try:
        if marker.is_symlink() or not marker.is_file() or marker.stat().st_size > _MAX_MARKER_BYTES:
            raise ValueError
        return _parse_marker(json.loads(marker.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError, OSError, UnicodeDecodeError, RecursionError):
        raise OutputFolderError(f"{marker}: not a marker splattrain process wrote; give another output folder") from None


def inspect(src: Path, out: Path, ignore: Iterable[str] = ()) -> Marker | None:
    """Check, changing nothing, that process may write ``out``: the marker there (None for a
    new or empty folder: ``ignore`` names entries that do not count, nor does a temporary of the
    marker); OutputFolderError when it holds files process did not write, or links where it writes."""
    check_paths(src, out)
    marker = read_marker(out) if out.is_dir() else None
    if marker is None:
        ignored = set(ignore)
        if out.is_dir() and any(entry.name not in ignored and not _MARKER_TEMPORARY.match(entry.name)
                                for entry in out.iterdir()):
            raise OutputFolderError(f"{out}: output folder is not empty and was not written by splattrain process; "
                                    "give a new or empty folder")
        return None
    for name in OWNED:
        path = out / name
        if path.is_symlink():
            raise OutputFolderError(f"{path}: a symbolic link, which splattrain process never creates; remove it")
        if path.exists() and name not in marker.created:
            raise OutputFolderError(f"{path}: not written by splattrain process, which would replace it; "
                                    "move it away or give another output folder")
    if (out / WORK).exists() and not (out / WORK).is_dir():
        raise OutputFolderError(f"{out / WORK}: not a folder; splattrain process keeps its work files there")
    return marker


def claim(src: Path, out: Path, ignore: Iterable[str] = ()) -> Workspace:
    """The output folder as a :class:`Workspace` (created and marked when new or empty), with its
    work folder; OutputFolderError as :func:`inspect` says."""
    marker = inspect(src, out, ignore)
    space = Workspace(out, marker or Marker([]))
    if marker is None:
        out.mkdir(parents=True, exist_ok=True)
        space.write_marker()
    if not space.work.exists():
        space.work.mkdir()
        space.record(WORK)
    return space


def publish(space: Workspace, staged: Path, names: Iterable[str]) -> Path | None:
    """Move the scene folders ``names`` from ``staged`` into the output folder; the ones they
    replace (process's own, from an earlier run) go into the run's sibling ``<out>.old-<time>``
    folder, returned (None when nothing was replaced)."""
    names = list(names)
    replaced = [name for name in names if (space.out / name).exists() or (space.out / name).is_symlink()]
    for name in replaced:
        if name not in space.created or (space.out / name).is_symlink():  # checked when claimed; checked again
            raise OutputFolderError(f"{space.out / name}: not written by splattrain process; left as it is")
    aside = space.aside() if replaced else None
    for name in replaced:
        (space.out / name).rename(aside / name)
    for name in names:
        (staged / name).rename(space.out / name)
    space.record(*names)
    return aside
