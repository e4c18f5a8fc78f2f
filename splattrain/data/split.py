"""Train / test splits for formats without split files, the validation views held out of training,
and unique frame names."""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePosixPath
from typing import Optional, Sequence

from ..errors import ConfigError, DataError
from .types import SceneData


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


def validation_picks(count: int, val_split: Optional[float]) -> list[bool]:
    """Which of ``count`` training views (in the reader's order) ``data.val_split`` holds out.

    None holds out nothing (validation uses the test views); a whole number N >= 2 holds out every
    N-th view, starting with the N-th; a fraction in (0, 1) holds out that share of the views
    (at least one), spread evenly over them. Raises ConfigError for other values, and DataError
    when no training view would be left.
    """
    if val_split is None:
        return [False] * count
    value = float(val_split)
    if 0.0 < value < 1.0:
        chosen = max(1, round(value * count))
        picks = {int((j + 0.5) * count / chosen) for j in range(chosen)}
    elif value >= 2.0 and value.is_integer():
        every = int(value)
        picks = {i for i in range(count) if i % every == every - 1}
    else:
        raise ConfigError(f"key 'data.val_split' must be null, a whole number >= 2 (every N-th training view) "
                          f"or a fraction between 0 and 1, got {val_split}")
    if count and len(picks) >= count:
        raise DataError(f"data.val_split={val_split:g} would hold out all {count} training views; "
                        "hold out fewer (a larger N or a smaller fraction)")
    return [i in picks for i in range(count)]


def split_validation(scene: SceneData, val_split: Optional[float]) -> SceneData:
    """``scene`` with the training views ``data.val_split`` picks moved to ``scene.val`` (never a
    test view: they come from the training views only); noted in ``extra["notes"]``."""
    picks = validation_picks(len(scene.train), val_split)
    if not any(picks):
        return scene
    held = [frame for frame, pick in zip(scene.train, picks) if pick]
    notes = list(scene.extra.get("notes", []))
    shown = ", ".join(frame.name for frame in held[:4]) + (", ..." if len(held) > 4 else "")
    notes.append(f"data.val_split={val_split:g}: {len(held)} of {len(scene.train)} training views held out "
                 f"for validation ({shown})")
    return replace(scene, train=[frame for frame, pick in zip(scene.train, picks) if not pick], val=held,
                   extra={**scene.extra, "notes": notes})
