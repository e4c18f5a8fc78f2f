"""Pick the reader for a dataset folder, load it, and normalise the scene."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from ..config.schema import DataConfig
from ..errors import ConfigError, DataError
from ..registry import DATASETS
from .types import SceneData

#: Formats whose world frame is arbitrary (normalised unless data.normalize says otherwise).
_NORMALIZED_BY_DEFAULT = ("colmap", "nerfstudio")


@DATASETS.register("colmap")
def _load_colmap(path: str, cfg: DataConfig) -> SceneData:
    """COLMAP scenes (images/ plus sparse/0/ or sparse/, binary or text; images_N/ for downscales)."""
    from .colmap import load_colmap

    return load_colmap(path, cfg)


@DATASETS.register("blender", aliases=("nerf_synthetic",))
def _load_blender(path: str, cfg: DataConfig) -> SceneData:
    """NeRF-synthetic / Blender folders (transforms_train.json, transforms_test.json, PNGs)."""
    from .blender import load_blender

    return load_blender(path, cfg)


@DATASETS.register("nerfstudio")
def _load_nerfstudio(path: str, cfg: DataConfig) -> SceneData:
    """nerfstudio folders (one transforms.json; per-frame or shared intrinsics, distortion, masks)."""
    from .nerfstudio import load_nerfstudio

    return load_nerfstudio(path, cfg)


def detect_format(path: Path) -> str:
    """The dataset type of the folder ``path``, from the files it contains."""
    from .colmap import find_sparse

    if not path.is_dir():
        raise DataError(f"data.path '{path}' is not a folder")
    if (path / "transforms_train.json").is_file():
        return "blender"
    if (path / "transforms.json").is_file():
        return "nerfstudio"
    if find_sparse(path) is not None:
        return "colmap"
    raise DataError(
        f"data.path '{path}': cannot tell the dataset format (no transforms_train.json, transforms.json, "
        f"or sparse/0/ with cameras.bin or cameras.txt); set data.type to one of {', '.join(DATASETS)}"
    )


def _data_config(cfg: DataConfig | DictConfig) -> DataConfig:
    """A typed, checked copy of the ``data`` section."""
    data: Any = OmegaConf.to_object(cfg) if isinstance(cfg, DictConfig) else cfg
    if data.test_every < 0:
        raise ConfigError(f"key 'data.test_every' must be >= 0, got {data.test_every}")
    if data.num_workers < 0:
        raise ConfigError(f"key 'data.num_workers' must be >= 0, got {data.num_workers}")
    if data.downscale <= 0:
        raise ConfigError(f"key 'data.downscale' must be > 0, got {data.downscale}")
    return data


def load_scene(cfg: DataConfig | DictConfig) -> tuple[str, SceneData]:
    """Load the scene the ``data`` config describes; returns (format, scene).

    ``data.type`` auto detects the format (noted in ``extra["notes"]``). The scene is
    normalised per ``data.normalize``; ``extra["world_transform"]`` (float64 [4,4]) always
    maps the dataset's own world frame to the returned one (identity when not normalised).
    """
    data = _data_config(cfg)
    kind = data.type
    notes = []
    if kind == "auto":
        kind = detect_format(Path(data.path))
        notes.append(f"data.type auto: detected {kind} in {data.path}")
    scene = DATASETS.get(kind)(data.path, data)
    scene.extra["notes"] = notes + list(scene.extra.get("notes", []))
    scene.extra.setdefault("world_transform", np.eye(4))
    normalize = data.normalize if data.normalize is not None else kind in _NORMALIZED_BY_DEFAULT
    if normalize and scene.train:
        from .normalize import normalize_scene

        scene = normalize_scene(scene)
        scale = scene.extra["world_transform"][0, 0]
        scene.extra["notes"].append(
            f"data.normalize: cameras centred and scaled by {scale:.4g} (world_transform recorded for export)"
        )
    if not scene.test:
        scene.extra["notes"].append("no test views: validation metrics will be null")
    return kind, scene
