"""Find the scene folder a user meant: a relative ``data.path`` next to the config, and the
COLMAP or nerfstudio folder below a project root (``dense/0``, ``sparse/N``, one level down)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

from ..errors import DataError
from .colmap_model import model_files

#: How deep below ``data.path`` scene folders are looked for (``dense/0`` is two levels down).
SEARCH_DEPTH = 3
_SKIP = {"images", "masks", "input", "stereo", "depth_maps", "normal_maps", ".git"}


def resolve_data_path(path: str, config_dir: Optional[Path]) -> Tuple[Path, List[str]]:
    """``data.path`` as a folder: as given (relative to the working directory), else relative to
    the config file's folder or its parent; returns (folder, notes saying which was used)."""
    given = Path(path).expanduser()
    if given.exists() or given.is_absolute() or config_dir is None:
        return given, []
    for base in (config_dir, config_dir.parent):
        candidate = base / given
        if candidate.exists():
            return candidate, [f"data.path '{path}' is not in the working directory; using {candidate} "
                               "(relative to the config file)"]
    return given, []


def colmap_models(folder: Path) -> List[Path]:
    """The sparse models of a COLMAP folder: ``sparse/`` itself, else each ``sparse/N``."""
    sparse = folder / "sparse"
    if model_files(sparse) is not None:
        return [sparse]
    if not sparse.is_dir():
        return []
    return sorted(p for p in sparse.iterdir() if p.is_dir() and model_files(p) is not None)


def is_colmap_scene(folder: Path) -> bool:
    """Whether ``folder`` holds ``images/`` and at least one sparse model beside it."""
    return (folder / "images").is_dir() and bool(colmap_models(folder))


def _walk(root: Path, depth: int) -> List[Path]:
    """``root`` and its sub-folders down to ``depth`` levels (image and mask folders skipped)."""
    found = [root]
    if depth == 0:
        return found
    try:
        children = sorted(
            p for p in root.iterdir() if p.is_dir() and p.name not in _SKIP and not p.name.startswith("images_")
        )
    except OSError:
        return found
    for child in children:
        found += _walk(child, depth - 1)
    return found


def scene_candidates(root: Path, kind: str) -> List[Tuple[Path, str]]:
    """(folder, model description) for every scene of ``kind`` (colmap | nerfstudio | auto) below ``root``."""
    found: List[Tuple[Path, str]] = []
    for folder in _walk(root, SEARCH_DEPTH):
        if kind in ("auto", "colmap") and (folder / "images").is_dir():
            found += [(folder, f"colmap model {model}") for model in colmap_models(folder)]
        if kind in ("auto", "nerfstudio") and (folder / "transforms.json").is_file() and folder != root:
            if folder.parent == root:  # nerfstudio folders one level down only
                found.append((folder, f"nerfstudio {folder / 'transforms.json'}"))
    return found


def locate_scene(root: Path, kind: str) -> Tuple[Path, Optional[Path], List[str]]:
    """The scene folder below ``root`` for a reader of ``kind`` (auto | colmap | nerfstudio).

    Returns (folder, sparse model or None, notes). ``root`` itself is used when it is a
    complete scene with one model. Raises DataError listing the candidates when there are
    several, and returns ``root`` unchanged when there are none (the reader then says what is missing).
    """
    candidates = scene_candidates(root, kind)
    if not candidates:
        return root, None, []
    if len(candidates) > 1:
        listed = "; ".join(f"{folder} ({what})" for folder, what in candidates)
        raise DataError(
            f"data.path '{root}' holds {len(candidates)} scenes: {listed}; point data.path at one of them "
            "(for several sparse/N models set data.type colmap and data.options.model to the one to use, e.g. sparse/1)"
        )
    folder, what = candidates[0]
    model = Path(what.split(" ", 2)[2]) if what.startswith("colmap model ") else None
    if folder == root and (model is None or model.name in ("sparse", "0")):
        return root, model, []
    return folder, model, [f"data.path '{root}' is not itself a scene; using {folder} ({what})"]
