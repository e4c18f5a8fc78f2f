"""What a dataset reader returns: frames (image + camera) and optional points."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ..cameras import Camera


@dataclass
class Frame:
    """One posed photograph.

    Attributes:
        image: uint8 [H, W, 3] (RGB) or [H, W, 4] (RGBA, composited later over the background);
            None for a frame beyond the scene's image memory budget (``data.image_budget_mb``),
            whose ``reload`` decodes it again each time it is used: read it with :meth:`pixels`.
        camera: the camera that took it (CPU tensors); its size matches ``image``.
        name: a stable name for the view (file stem), used for logs and image files.
        mask: optional bool [H, W]; False marks pixels that count in neither loss nor metrics.
        depth: optional float32 [H, W] depth along the camera's z axis, in the scene's (normalised)
            units; 0 where unknown.
    """

    image: Optional[np.ndarray]
    camera: Camera
    name: str
    mask: Optional[np.ndarray] = None
    depth: Optional[np.ndarray] = None
    reload: Optional[Callable[[], np.ndarray]] = field(default=None, repr=False, compare=False)

    def pixels(self) -> np.ndarray:
        """The image: the one held, or decoded again from its file."""
        if self.image is not None:
            return self.image
        if self.reload is None:
            raise ValueError(f"frame {self.name} holds no image and cannot decode one")
        return self.reload()


@dataclass
class SceneData:
    """A loaded scene: train, test and validation frames, plus an optional sparse point cloud.

    ``val`` holds the training views ``data.val_split`` keeps out of training (empty without one).

    ``extra`` holds ``notes`` (list[str], shown to the user by the trainer) and, once
    :func:`splattrain.data.loading.load_scene` has run, ``world_transform``: float64 [4,4],
    the similarity mapping the files' world frame to the frame of these cameras and points.
    """

    train: list[Frame]
    test: list[Frame]
    points: Optional[np.ndarray] = None  # float32 [P, 3]
    point_colors: Optional[np.ndarray] = None  # uint8 [P, 3]
    source: str = ""
    extra: dict = field(default_factory=dict)
    val: list[Frame] = field(default_factory=list)
    observed: dict[str, np.ndarray] = field(default_factory=dict)  # frame name -> indices of the points its photo saw
