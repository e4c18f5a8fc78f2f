"""Train / test splits for formats without split files, and unique frame names."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Sequence

from ..errors import DataError


def frame_names(files: Sequence[str]) -> list[str]:
    """Frame names for image file names: the path without extension, '/' -> '_'; full names if those clash."""
    stems = [PurePosixPath(f).with_suffix("").as_posix().replace("/", "_") for f in files]
    if len(set(stems)) == len(stems):
        return stems
    return [f.replace("/", "_") for f in files]


def held_out(files: Sequence[str], test_every: int, test_images: Sequence[str], source: str) -> list[bool]:
    """Which of ``files`` (sorted by the caller) are test views.

    ``test_images`` (paths as listed or bare file names, with or without extension) wins when given; otherwise every
    ``test_every``-th file, starting with the first, is held out (the 3DGS / Mip-NeRF 360
    convention); ``test_every`` 0 holds out nothing. Raises DataError for unknown names or
    when no training view would be left.
    """
    if test_images:
        lookup: dict[str, int] = {}
        for index, (file, stem) in enumerate(zip(files, frame_names(files))):
            path = PurePosixPath(file)
            for key in (file, stem, path.with_suffix("").as_posix(), path.name, path.stem):
                lookup.setdefault(key, index)
        chosen = set()
        for name in test_images:
            if name not in lookup:
                raise DataError(f"data.test_images: {name!r} is not an image of {source}; use names as listed there")
            chosen.add(lookup[name])
        is_test = [i in chosen for i in range(len(files))]
    else:
        is_test = [test_every > 0 and i % test_every == 0 for i in range(len(files))]
    if all(is_test):
        raise DataError(
            f"{source}: all {len(files)} images would be test views, none left to train on; "
            "set data.test_every=0 (no test views) or list fewer data.test_images"
        )
    return is_test
