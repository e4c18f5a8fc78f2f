"""Find the scene folder a user meant: a relative ``data.path`` next to the config, and the scene
below a project root (each reader says what its scenes look like: ``DatasetReader.scenes_below``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import DataError

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


def folders_below(root: Path, depth: int = SEARCH_DEPTH) -> List[Path]:
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
        found += folders_below(child, depth - 1)
    return found


def choose_scene(root: Path, candidates: Sequence[Tuple[str, Any]]) -> Optional[Tuple[str, Path, Dict[str, Any], List[str]]]:
    """The one scene among ``candidates`` (reader name, :class:`~splattrain.data.reader.SceneFolder`)
    found below ``root``: (reader name, folder, reader options, notes), or None when there are none.
    Raises DataError listing them when there are several."""
    if not candidates:
        return None
    if len(candidates) > 1:
        listed = "; ".join(f"{scene.folder} ({scene.description})" for _, scene in candidates)
        raise DataError(
            f"data.path '{root}' holds {len(candidates)} scenes: {listed}; point data.path at one of them "
            "(for several sparse/N models set data.type colmap and data.options.model to the one to use, e.g. sparse/1)"
        )
    name, scene = candidates[0]
    if scene.folder == root and not scene.options:
        return name, root, {}, []
    return name, scene.folder, dict(scene.options), [f"data.path '{root}' is not itself a scene; using "
                                                     f"{scene.folder} ({scene.description})"]
