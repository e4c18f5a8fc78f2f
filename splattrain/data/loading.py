"""Pick the reader for a dataset folder, load it, and normalise the scene."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np
from omegaconf import DictConfig, OmegaConf

from ..config.schema import DataConfig
from ..errors import ConfigError, DataError
from ..registry import DATASETS
from .depths import attach_depths, depth_folder
from .images import PHOTO_SUFFIXES
from .locate import locate_scene, resolve_data_path
from .reader import DatasetReader
from .types import SceneData


@DATASETS.register("colmap")
class ColmapReader(DatasetReader):
    """COLMAP scenes (images/ plus sparse/0/ or sparse/, binary or text; images_N/ for downscales).

    ``model`` picks one of several sparse models (e.g. ``sparse/1``), relative to the scene folder.
    """

    normalize_by_default = True

    def __init__(self, model: Optional[str] = None) -> None:
        self.model = model

    @classmethod
    def detect(cls, path: Path) -> bool:
        from .colmap import find_sparse

        return find_sparse(path) is not None

    def load(self, path: str, cfg: DataConfig) -> SceneData:
        from .colmap import load_colmap

        return load_colmap(path, cfg, model=self.model)


@DATASETS.register("nerfstudio")
class NerfstudioReader(DatasetReader):
    """nerfstudio folders (one transforms.json; per-frame or shared intrinsics, distortion, masks)."""

    normalize_by_default = True

    @classmethod
    def detect(cls, path: Path) -> bool:
        return (path / "transforms.json").is_file()

    def load(self, path: str, cfg: DataConfig) -> SceneData:
        from .nerfstudio import load_nerfstudio

        return load_nerfstudio(path, cfg)


@DATASETS.register("blender", aliases=("nerf_synthetic",))
class BlenderReader(DatasetReader):
    """NeRF-synthetic / Blender folders (transforms_train.json, transforms_test.json, PNGs)."""

    @classmethod
    def detect(cls, path: Path) -> bool:
        return (path / "transforms_train.json").is_file()

    def load(self, path: str, cfg: DataConfig) -> SceneData:
        from .blender import load_blender

        return load_blender(path, cfg)


def detect_format(path: Path) -> str:
    """The dataset type of the folder ``path``: the first registered reader (newest first) whose
    ``detect`` accepts it."""
    if not path.is_dir():
        raise DataError(f"data.path '{path}' is not a folder")
    for name, reader in reversed(DATASETS.entries()):
        detect = getattr(reader, "detect", None)
        if detect is not None and detect(path):
            return name
    if _holds_photos(path):
        scene = path.with_name(path.name + "_scene") if path.name else Path("scene")
        raise DataError(
            f"data.path '{path}' holds photos but no camera poses; make a scene of them first: "
            f"splattrain process {path} {scene}, then data.path={scene}"
        )
    raise DataError(
        f"data.path '{path}': cannot tell the dataset format (no reader recognises it: blender needs "
        f"transforms_train.json, nerfstudio transforms.json, colmap sparse/0/ with cameras.bin or cameras.txt); "
        f"set data.type to one of {', '.join(DATASETS)}"
    )


def _holds_photos(path: Path) -> bool:
    """Whether ``path`` (or its images/ folder) holds photos: a capture not yet through structure from motion."""
    return any(p.suffix.lower() in PHOTO_SUFFIXES for folder in (path, path / "images") if folder.is_dir()
               for p in folder.iterdir())


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


def find_scene(data: DataConfig, config_dir: Optional[Path]) -> tuple[str, Path, dict, list[str]]:
    """(reader name, scene folder, reader options, notes) for ``data``: a relative path is also
    looked for next to the config, and a COLMAP/nerfstudio scene below the folder given."""
    root, notes = resolve_data_path(data.path, config_dir)
    kind, options = data.type, dict(data.options)
    if kind not in ("auto", "colmap", "nerfstudio"):
        return kind, root, options, notes
    if kind == "nerfstudio" and (root / "transforms.json").is_file():
        return kind, root, options, notes
    direct = _detected(root) if kind == "auto" else kind
    if (direct in (None, "colmap") or kind == "nerfstudio") and "model" not in options and root.is_dir():
        found, model, located = locate_scene(root, kind)
        notes += located
        if found != root or model is not None:
            root = found
            if model is not None:
                direct = "colmap"
                if model.parent.name == "sparse" and model.name != "0":
                    options["model"] = model.relative_to(root).as_posix()
            else:
                direct = "nerfstudio" if (root / "transforms.json").is_file() else direct
    if kind == "auto":
        kind = direct if direct is not None else detect_format(root)
        notes.append(f"data.type auto: detected {kind} in {root}")
    return kind, root, options, notes


def _detected(path: Path) -> Optional[str]:
    try:
        return detect_format(path)
    except DataError:
        return None


def load_scene(cfg: DataConfig | DictConfig, config_dir: Optional[Path] = None) -> tuple[str, SceneData]:
    """Load the scene the ``data`` config describes; returns (format, scene).

    A relative ``data.path`` missing from the working directory is looked for relative to
    ``config_dir`` (the config file's folder) and its parent; a COLMAP or nerfstudio project
    root is searched for the one folder holding the scene (:mod:`splattrain.data.locate`).
    ``data.type`` auto detects the format (noted in ``extra["notes"]``). The scene is
    normalised per ``data.normalize``; ``extra["world_transform"]`` (float64 [4,4]) always
    maps the dataset's own world frame to the returned one (identity when not normalised).
    """
    data = _data_config(cfg)
    kind, root, options, notes = find_scene(data, config_dir)
    reader = DATASETS.build({"type": kind, **options}, where="data.options")
    if not isinstance(reader, DatasetReader):
        raise ConfigError(f"dataset {kind!r} does not derive from splattrain.DatasetReader")
    scene = reader.load(str(root), data)
    scene.extra["notes"] = notes + list(scene.extra.get("notes", []))
    scene.extra.setdefault("world_transform", np.eye(4))
    normalize = data.normalize if data.normalize is not None else reader.normalize_by_default
    if normalize and scene.train:
        from .normalize import normalize_scene

        scene = normalize_scene(scene)
        scale = scene.extra["world_transform"][0, 0]
        scene.extra["notes"].append(
            f"data.normalize: cameras centred and scaled by {scale:.4g} (world_transform recorded for export)"
        )
    depths = depth_folder(Path(root), data.depths)
    if depths is not None and scene.train:
        scale = float(np.linalg.norm(scene.extra["world_transform"][:3, 0]))
        count = attach_depths(scene, depths, scale)
        scene.extra["notes"].append(f"depth maps for {count} views from {depths}")
    if not scene.test:
        scene.extra["notes"].append("no test views: validation metrics will be null")
    return kind, scene
