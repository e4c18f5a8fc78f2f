"""Files and folders splattrain writes: files it appends to (logs, metrics) are opened so that a
symbolic link is refused, never written through, and the folders a command writes into are made
level by level, each one refused when it is a link or not a folder."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import IO, Iterable, Optional

from .errors import UserError


class NotARegularFileError(UserError):
    """A file or folder splattrain writes is a symbolic link, a FIFO, a device or a file in a folder's place."""


def linked_folder_error(path: Path) -> NotARegularFileError:
    """The one-line refusal of a link to a folder (or to nothing) where splattrain writes."""
    return NotARegularFileError(f"'{path}' is a symbolic link to a folder (or to nothing); splattrain writes its "
                                "files only into real folders, never through a link: remove it")


def linked_file_error(path: Path) -> NotARegularFileError:
    """The one-line refusal of a link where splattrain writes a file."""
    return NotARegularFileError(f"'{path}' is a symbolic link; splattrain writes its files only as regular "
                                "files, never through a link: remove it")


def open_append(path: str | Path, newline: str | None = None) -> IO[str]:
    """``path`` opened to append UTF-8 text, created when missing. A symbolic link there is refused
    (:class:`NotARegularFileError` naming ``path``), never written through, and so is anything but
    a regular file (a FIFO, a device)."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP or path.is_symlink():
            raise linked_file_error(path) from None
        raise
    if not _is_regular(fd):
        os.close(fd)
        raise NotARegularFileError(f"'{path}' is not a regular file; splattrain writes its files only as regular files")
    os.set_blocking(fd, True)
    return open(fd, "a", encoding="utf-8", newline=newline)


def _is_regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def first_link(folder: Path, files: bool = False) -> Optional[Path]:
    """The first symbolic link found under ``folder`` (links are listed, never followed): a link to
    a folder or to nothing, or with ``files`` any link; None when there is none."""
    for parent, folders, names in os.walk(folder):
        for name in sorted(folders + names):
            path = Path(parent) / name
            if path.is_symlink() and (files or not path.is_file()):
                return path
    return None


def refuse_links_under(folder: Path, files: bool = False) -> None:
    """Refuse (one line naming it) the first link :func:`first_link` finds under ``folder``."""
    link = first_link(folder, files)
    if link is not None:
        raise linked_folder_error(link) if not link.is_file() else linked_file_error(link)


def check_folder_level(path: Path) -> None:
    """Refuse a level where splattrain writes that is a link, or a file in a folder's place."""
    if path.is_symlink():
        raise linked_folder_error(path) if not path.is_file() else linked_file_error(path)
    if path.exists() and not path.is_dir():
        raise NotARegularFileError(f"'{path}' is not a folder; splattrain writes its files into a folder there: "
                                   "move it, or choose another place with --out")


class OutputFolder:
    """A folder a command writes into: ``base`` (a folder the user named, or the run folder), and the
    levels ``relative`` below it. Every level below ``base`` that it makes, and every file it
    writes, is refused when it is a symbolic link (or not a folder, for a level), never followed."""

    def __init__(self, base: Path, relative: str | Path = "") -> None:
        self.base = Path(base)
        self.relative = Path(relative)

    @property
    def path(self) -> Path:
        """The folder itself."""
        return self.base / self.relative

    def check(self, subfolders: Iterable[str] = (), whole: bool = False) -> "OutputFolder":
        """Refuse, before anything is written, a level of the folder or of ``subfolders`` that is a
        link or a file; with ``whole``, also a link anywhere in what the folder holds already."""
        for level in self._levels(*(Path(sub) for sub in subfolders)):
            check_folder_level(level)
        if whole and self.path.is_dir() and not self.path.is_symlink():
            refuse_links_under(self.path, files=True)
        return self

    def folder(self, *parts: str) -> Path:
        """The folder ``parts`` below this one, made level by level (each level checked)."""
        try:
            self.base.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):  # a file where the folder (or one above it) should be
            blocker = next((p for p in (self.base, *self.base.parents) if p.exists() and not p.is_dir()), self.base)
            raise NotARegularFileError(f"not a directory: '{blocker}' is a file where a folder of "
                                       f"'{self.base}' should be; move it, or choose another place with --out") from None
        for level in self._levels(Path(*parts) if parts else Path()):
            check_folder_level(level)
            try:
                level.mkdir()
            except FileExistsError:
                pass
            check_folder_level(level)  # something put there meanwhile
        return self.path.joinpath(*parts)

    def file(self, *parts: str) -> Path:
        """The path of the file ``parts`` in this folder (its folders made); a link there is refused."""
        path = self.folder(*parts[:-1]) / parts[-1]
        if path.is_symlink():
            raise linked_file_error(path)
        return path

    def _levels(self, *subs: Path) -> list:
        """Every level below ``base`` down to this folder, then down each of ``subs``."""
        levels, level = [], self.base
        for part in self.relative.parts:
            level = level / part
            levels.append(level)
        for sub in subs:
            below = self.path
            for part in sub.parts:
                below = below / part
                if below not in levels:
                    levels.append(below)
        return levels
