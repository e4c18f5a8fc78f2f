"""Between the browser's camera (a pose and a vertical field of view) and splattrain's Camera."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np
import torch

from ..cameras import Camera

#: Limits of the viewer's resolution control (pixels on the long side of the image).
MIN_RESOLUTION = 64
MAX_RESOLUTION = 2048
#: What a browser's camera may be: a field of view in radians, an aspect ratio, a distance from the origin.
FOV_RANGE = (1e-3, 3.1)
ASPECT_RANGE = (1e-2, 1e2)
MAX_POSITION = 1e7


@dataclass(frozen=True)
class ViewPose:
    """A browser camera: camera-to-world rotation (wxyz quaternion) and position, in the
    OpenCV convention (x right, y down, z forward), the vertical field of view in radians
    and the canvas aspect ratio (width / height)."""

    wxyz: Tuple[float, float, float, float]
    position: Tuple[float, float, float]
    fov: float
    aspect: float


def pose_problem(pose: ViewPose) -> Optional[str]:
    """Why a browser's camera cannot be rendered (None when it can): every number finite, a
    non-zero quaternion, the field of view and aspect ratio within FOV_RANGE and ASPECT_RANGE."""
    try:
        wxyz = [float(v) for v in pose.wxyz]
        position = [float(v) for v in pose.position]
        fov, aspect = float(pose.fov), float(pose.aspect)
    except (TypeError, ValueError):
        return "a camera value that is not a number"
    if len(wxyz) != 4 or len(position) != 3:
        return "a camera pose of the wrong size"
    if not all(math.isfinite(v) for v in (*wxyz, *position, fov, aspect)):
        return "a camera value that is not finite"
    if math.sqrt(sum(v * v for v in wxyz)) < 1e-6:
        return "a camera rotation of zero length"
    if max(abs(v) for v in position) > MAX_POSITION:
        return f"a camera position farther than {MAX_POSITION:g} from the origin"
    if not FOV_RANGE[0] <= fov <= FOV_RANGE[1]:
        return f"field of view {fov:g} rad (use {FOV_RANGE[0]:g}..{FOV_RANGE[1]:g})"
    if not ASPECT_RANGE[0] <= aspect <= ASPECT_RANGE[1]:
        return f"aspect ratio {aspect:g} (use {ASPECT_RANGE[0]:g}..{ASPECT_RANGE[1]:g})"
    return None


def quat_to_matrix(wxyz: Sequence[float]) -> np.ndarray:
    """Rotation matrix [3, 3] of a wxyz quaternion."""
    import viser.transforms as tf

    return tf.SO3(np.asarray(wxyz, dtype=np.float64)).normalize().as_matrix()


def matrix_to_quat(R: np.ndarray) -> Tuple[float, float, float, float]:
    """The wxyz unit quaternion of a rotation matrix."""
    import viser.transforms as tf

    w, x, y, z = (float(v) for v in tf.SO3.from_matrix(np.asarray(R, dtype=np.float64)).wxyz)
    return (w, x, y, z)


def image_size(aspect: float, resolution: int) -> Tuple[int, int]:
    """(width, height) with ``resolution`` pixels on the long side (clamped to 64..2048)."""
    long_side = int(min(MAX_RESOLUTION, max(MIN_RESOLUTION, resolution)))
    aspect = max(1e-3, float(aspect))
    if aspect >= 1.0:
        return long_side, max(1, int(round(long_side / aspect)))
    return max(1, int(round(long_side * aspect))), long_side


def pose_to_camera(pose: ViewPose, resolution: int, name: str = "viewer") -> Camera:
    """The pinhole Camera the browser is looking through, ``resolution`` pixels on its long side
    (ValueError for a pose :func:`pose_problem` refuses)."""
    problem = pose_problem(pose)
    if problem is not None:
        raise ValueError(f"cannot render {problem}")
    width, height = image_size(pose.aspect, resolution)
    focal = 0.5 * height / math.tan(0.5 * pose.fov)
    c2w = np.eye(4)
    c2w[:3, :3] = quat_to_matrix(pose.wxyz)
    c2w[:3, 3] = pose.position
    viewmat = torch.from_numpy(np.linalg.inv(c2w)).float()
    K = torch.tensor([[focal, 0.0, width / 2.0], [0.0, focal, height / 2.0], [0.0, 0.0, 1.0]])
    return Camera(viewmat=viewmat, K=K, width=width, height=height, name=name)


def camera_pose(camera: Camera) -> ViewPose:
    """The browser pose of a dataset camera (its vertical field of view and aspect)."""
    c2w = np.linalg.inv(camera.viewmat.detach().cpu().double().numpy())
    fy = float(camera.K[1, 1])
    fov = 2.0 * math.atan(0.5 * camera.height / fy)
    position = tuple(float(v) for v in c2w[:3, 3])
    return ViewPose(matrix_to_quat(c2w[:3, :3]), position, fov, camera.width / camera.height)  # type: ignore[arg-type]


def mean_up_direction(cameras: Sequence[Camera]) -> np.ndarray:
    """The world's up direction as the cameras see it: the mean of their -y axes, normalised."""
    ups = [-np.linalg.inv(c.viewmat.detach().cpu().double().numpy())[:3, 1] for c in cameras]
    up = np.mean(ups, axis=0) if ups else np.array([0.0, 0.0, 1.0])
    norm = np.linalg.norm(up)
    return up / norm if norm > 1e-6 else np.array([0.0, 0.0, 1.0])


def overview_pose(cameras: Sequence[Camera], pull_back: float = 0.6, rise: float = 0.35) -> ViewPose:
    """The first camera moved back (away from the point the cameras look at) by ``pull_back``
    and up by ``rise`` times its distance to it, looking at that point: the scene and the
    cameras near it in view, the first camera below the middle."""
    from ..data.pipeline import focus_point

    first = camera_pose(cameras[0])
    focus = focus_point(list(cameras)).double().numpy()
    offset = np.asarray(first.position) - focus
    distance = float(np.linalg.norm(offset))
    if distance < 1e-9:
        return first
    up = -quat_to_matrix(first.wxyz)[:, 1]
    position = focus + offset * (1.0 + pull_back) + up * distance * rise
    forward = (focus - position) / np.linalg.norm(focus - position)
    right = np.cross(forward, up)
    if np.linalg.norm(right) < 1e-6:
        return first
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    return ViewPose(matrix_to_quat(np.stack([right, down, forward], axis=1)), tuple(float(v) for v in position),
                    first.fov, first.aspect)  # type: ignore[arg-type]
