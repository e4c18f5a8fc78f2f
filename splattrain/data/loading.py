"""Pick the reader for a dataset folder, load it, and normalise the scene (no format is named here:
each reader module registers itself and says what its folders look like)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np
from omegaconf import DictConfig, OmegaConf

from ..config.schema import DataConfig
from ..errors import ConfigError, DataError
from ..registry import DATASETS
from .depths import attach_depths, attach_sparse_depths, depth_folder
from .images import PHOTO_SUFFIXES
from .locate import choose_scene, resolve_data_path
from .reader import DatasetReader
from .split import split_validation, validation_picks
from .types import SceneData


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
    hints = ", ".join(reader.detect_hint for _, reader in DATASETS.entries() if getattr(reader, "detect_hint", ""))
    raise DataError(
        f"data.path '{path}': cannot tell the dataset format (no reader recognises it: {hints}); "
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
    validation_picks(0, data.val_split)  # a malformed value is refused before any image is read
    return data


def find_scene(data: DataConfig, config_dir: Optional[Path]) -> tuple[str, Path, dict, list[str]]:
    """(reader name, scene folder, reader options, notes) for ``data``: a relative path is also
    looked for next to the config, and the scene below a project root (the readers' ``scenes_below``)."""
    root, notes = resolve_data_path(data.path, config_dir)
    kind, options = data.type, dict(data.options)
    readers = list(reversed(DATASETS.entries())) if kind == "auto" else [(kind, DATASETS.get(kind))]
    detected = next((name for name, reader in readers if root.is_dir() and _detects(reader, root)), None)
    reader = dict(readers).get(detected)
    if not options and root.is_dir() and (reader is None or getattr(reader, "searched_when_detected", False)):
        found = choose_scene(root, [(name, scene) for name, each in readers
                                    for scene in getattr(each, "scenes_below", lambda _: [])(root)])
        if found is not None:
            detected, root, options, located = found
            notes += located
    if kind == "auto":
        kind = detected if detected is not None else detect_format(root)
        notes.append(f"data.type auto: detected {kind} in {root}")
    return kind, root, options, notes


def _detects(reader: Any, path: Path) -> bool:
    detect = getattr(reader, "detect", None)
    return bool(detect is not None and detect(path))


def load_scene(cfg: DataConfig | DictConfig, config_dir: Optional[Path] = None) -> tuple[str, SceneData]:
    """Load the scene the ``data`` config describes; returns (format, scene).

    A relative ``data.path`` missing from the working directory is looked for relative to
    ``config_dir`` (the config file's folder) and its parent; a COLMAP or nerfstudio project
    root is searched for the one folder holding the scene (:mod:`splattrain.data.locate`).
    ``data.type`` auto detects the format (noted in ``extra["notes"]``). The scene is
    normalised per ``data.normalize``; ``extra["world_transform"]`` (float64 [4,4]) always
    maps the dataset's own world frame to the returned one (identity when not normalised).
    ``data.val_split`` then moves some training views to ``scene.val`` (after normalising, so the
    scene's frame is the one the run without a validation split has).
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
    if data.depths == "sparse" and scene.train:
        count = attach_sparse_depths(scene)
        scene.extra["notes"].append(f"depth maps of the sparse points each photo saw for {count} views")
    depths = depth_folder(Path(root), data.depths)
    if depths is not None and scene.train:
        scale = float(np.linalg.norm(scene.extra["world_transform"][:3, 0]))
        count = attach_depths(scene, depths, scale)
        scene.extra["notes"].append(f"depth maps for {count} views from {depths}")
    if not scene.test:
        scene.extra["notes"].append("no test views: validation metrics will be null")
    return kind, split_validation(scene, data.val_split)
