"""What ``splattrain process`` was given: a folder of photos or a video file."""

from __future__ import annotations

from pathlib import Path
from typing import List

from ..data.images import PHOTO_SUFFIXES as IMAGE_SUFFIXES
from ..errors import UserError

#: Photo files COLMAP's reader and splattrain's both decode.
#: Video containers handed to ffmpeg (anything else that ffmpeg reads works too when named as a file).
VIDEO_SUFFIXES = (".mp4", ".mov", ".m4v", ".avi", ".mkv", ".webm")


def list_images(folder: Path) -> List[str]:
    """The photos under ``folder`` as sorted paths relative to it (sub-folders included: with
    ``--camera per-folder`` each sub-folder gets its own camera). UserError when there are none."""
    if not folder.is_dir():
        raise UserError(f"{folder}: input folder not found")
    names = sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob("*")
        if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".")
    )
    if not names:
        raise UserError(f"{folder}: no images found (looked for {', '.join(IMAGE_SUFFIXES)} files)")
    return names


def input_kind(path: Path) -> str:
    """``"images"`` for a folder, ``"video"`` for a file; UserError when ``path`` is neither."""
    if path.is_dir():
        return "images"
    if path.is_file():
        return "video"
    raise UserError(f"{path}: input not found (give a folder of photos or a video file)")
