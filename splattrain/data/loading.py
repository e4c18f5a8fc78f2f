"""Pick the reader for a dataset folder."""

from __future__ import annotations

from pathlib import Path

from ..errors import DataError
from ..registry import DATASETS
from .types import SceneData


@DATASETS.register("blender", aliases=("nerf_synthetic",))
def _load_blender(path: str, test_split: str = "test") -> SceneData:
    """NeRF-synthetic / Blender folders (transforms_train.json, transforms_test.json, PNGs)."""
    from .blender import load_blender

    return load_blender(path, test_split=test_split)


def detect_format(path: Path) -> str:
    """The dataset type of the folder ``path``, from the files it contains."""
    if not path.is_dir():
        raise DataError(f"data.path '{path}' is not a folder")
    if (path / "transforms_train.json").is_file():
        return "blender"
    raise DataError(
        f"data.path '{path}': cannot tell the dataset format (no transforms_train.json); "
        f"set data.type to one of {', '.join(DATASETS)}"
    )


def load_scene(kind: str, path: str, test_split: str = "test") -> tuple[str, SceneData]:
    """Load the scene at ``path`` with reader ``kind`` ('auto' detects it); returns (kind, scene)."""
    if kind == "auto":
        kind = detect_format(Path(path))
    reader = DATASETS.get(kind)
    return kind, reader(path, test_split=test_split)
