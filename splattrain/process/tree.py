"""Folders walked without recursion: an input or a work folder nested thousands of levels deep
costs a list, never Python's stack."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator, Tuple


def walk(folder: Path, enter: Callable[[str, int], bool] = lambda rel, depth: True
         ) -> Iterator[Tuple[str, os.DirEntry, int]]:
    """Every entry under ``folder`` as (path relative to it in POSIX form, its ``os.DirEntry``,
    its depth: 1 for the folder's own entries), parents before their contents.

    A sub-folder is entered when ``enter(rel, depth)`` says so; a symbolic link is never
    entered, whatever it points to. Entries of a folder come in name order.
    """
    stack = [("", folder, 0)]
    while stack:
        prefix, current, depth = stack.pop()
        with os.scandir(current) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
        folders = []
        for entry in entries:
            rel = f"{prefix}{entry.name}"
            yield rel, entry, depth + 1
            if entry.is_dir(follow_symlinks=False) and enter(rel, depth + 1):
                folders.append((f"{rel}/", Path(entry.path), depth + 1))
        stack.extend(reversed(folders))
