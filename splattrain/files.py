"""Files splattrain appends to (logs, metrics): opened so that a symbolic link is refused, never
written through."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import IO

from .errors import UserError


class NotARegularFileError(UserError):
    """A file splattrain appends to is a symbolic link, a FIFO or a device."""


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
            raise NotARegularFileError(f"'{path}' is a symbolic link; splattrain writes its files only as regular "
                                       "files, never through a link: remove it") from None
        raise
    if not _is_regular(fd):
        os.close(fd)
        raise NotARegularFileError(f"'{path}' is not a regular file; splattrain writes its files only as regular files")
    os.set_blocking(fd, True)
    return open(fd, "a", encoding="utf-8", newline=newline)


def _is_regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)
