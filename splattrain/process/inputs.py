"""What ``splattrain process`` was given: a folder of photos or a video file."""

from __future__ import annotations

from pathlib import Path
from typing import List

from ..data.images import PHOTO_SUFFIXES as IMAGE_SUFFIXES
from ..errors import UserError
from .tree import walk

#: Photo files COLMAP's reader and splattrain's both decode.
#: Video containers handed to ffmpeg (anything else that ffmpeg reads works too when named as a file).
VIDEO_SUFFIXES = (".mp4", ".mov", ".m4v", ".avi", ".mkv", ".webm")
#: Folders nested deeper than this in the input are refused: the scene, COLMAP and other
#: trainers carry every photo's path, and no capture nests its photos that deep.
MAX_DEPTH = 32


def list_images(folder: Path) -> List[str]:
    """The photos under ``folder`` as sorted paths relative to it (sub-folders included: with
    ``--camera per-folder`` each sub-folder gets its own camera; linked folders are not entered).
    UserError when there are none, or folders nest deeper than :data:`MAX_DEPTH`; the walk takes
    no recursion, so a deep tree is refused before anything is written."""
    if not folder.is_dir():
        raise UserError(f"{folder}: input folder not found")
    names = []
    for rel, entry, depth in walk(folder):
        if entry.is_dir(follow_symlinks=False):
            if depth > MAX_DEPTH:
                raise UserError(f"{folder}: folders nested more than {MAX_DEPTH} levels deep (from "
                                f"{rel.split('/')[0]}/); splattrain process reads photos at most {MAX_DEPTH} "
                                "levels down")
        elif entry.is_file() and Path(entry.name).suffix.lower() in IMAGE_SUFFIXES and not entry.name.startswith("."):
            names.append(rel)
    if not names:
        raise UserError(f"{folder}: no images found (looked for {', '.join(IMAGE_SUFFIXES)} files)")
    return sorted(names)


def input_kind(path: Path) -> str:
    """``"images"`` for a folder, ``"video"`` for a file; UserError when ``path`` is neither."""
    if path.is_dir():
        return "images"
    if path.is_file():
        return "video"
    raise UserError(f"{path}: input not found (give a folder of photos or a video file)")
