"""Scene normalisation: a similarity (shift + uniform scale) that centres and scales the cameras.

The transform ``T`` maps the dataset's world frame (``original``) to the training frame
(``normalized``): ``x_norm = s * x_orig + t``. It has no rotation, so going back needs only
``x_orig = (x_norm - t) / s`` for means and ``log(scale) - log(s)`` for Gaussian scales;
rotations and spherical harmonics are unchanged.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from .types import Frame, SceneData


def similarity_from_cameras(centers: np.ndarray) -> np.ndarray:
    """float64 [4,4] that moves the mean of ``centers`` [N,3] to the origin and the farthest one to radius 1."""
    mean = centers.mean(axis=0)
    radius = float(np.linalg.norm(centers - mean, axis=1).max()) if len(centers) else 0.0
    scale = 1.0 / radius if radius > 1e-9 else 1.0
    transform = np.eye(4)
    transform[:3, :3] *= scale
    transform[:3, 3] = -scale * mean
    return transform


def transform_scene(scene: SceneData, transform: np.ndarray) -> SceneData:
    """``scene`` with cameras and points moved by the similarity ``transform`` (recorded in ``extra``)."""
    scale = float(np.cbrt(np.linalg.det(transform[:3, :3])))
    shift = transform[:3, 3]

    def move(frame: Frame) -> Frame:
        viewmat = frame.camera.viewmat.double().numpy()
        moved = viewmat.copy()
        # x_cam' = s * x_cam keeps every projection and makes the pose rigid again in the new frame.
        moved[:3, 3] = scale * viewmat[:3, 3] - viewmat[:3, :3] @ shift
        camera = replace(frame.camera, viewmat=torch.from_numpy(moved.astype(np.float32)))
        return replace(frame, camera=camera)

    points = None
    if scene.points is not None:
        points = (scene.points.astype(np.float64) @ transform[:3, :3].T + shift).astype(np.float32)
    return replace(
        scene,
        train=[move(f) for f in scene.train],
        test=[move(f) for f in scene.test],
        points=points,
        extra={**scene.extra, "world_transform": transform @ scene.extra.get("world_transform", np.eye(4))},
    )


def normalize_scene(scene: SceneData) -> SceneData:
    """``scene`` centred on its training cameras and scaled so the farthest one is at distance 1."""
    centers = np.stack([f.camera.center.double().numpy() for f in scene.train])
    return transform_scene(scene, similarity_from_cameras(centers))
