"""Per-view pose refinement: a learned SE(3) correction of each training camera, turning about the
point the camera looks at, and kept free of motions of the whole scene and of a common orbit."""

from __future__ import annotations

import math
from typing import Dict, List, Mapping, Optional

import torch
from torch import Tensor

from ..cameras import Camera
from ..errors import ConfigError
from ..registry import POSE_OPT
from .base import ViewCorrection


def so3_exp(omega: Tensor) -> Tensor:
    """Rotation matrices [N,3,3] of axis-angle vectors [N,3] (Rodrigues, smooth at zero)."""
    theta2 = (omega * omega).sum(dim=-1, keepdim=True)[..., None]  # [N,1,1]
    theta = torch.sqrt(theta2 + 1e-24)
    zeros = torch.zeros_like(omega[:, 0])
    wx, wy, wz = omega.unbind(-1)
    k = torch.stack([zeros, -wz, wy, wz, zeros, -wx, -wy, wx, zeros], dim=-1).reshape(-1, 3, 3)
    small = theta2 < 1e-8
    a = torch.where(small, 1.0 - theta2 / 6.0, torch.sin(theta) / theta)
    b = torch.where(small, 0.5 - theta2 / 24.0, (1.0 - torch.cos(theta)) / (theta2 + 1e-24))
    return torch.eye(3, device=omega.device, dtype=omega.dtype) + a * k + b * (k @ k)


def pivot_depths(cameras: List[Camera], points: Tensor, fallback: float) -> Tensor:
    """Per camera, the median depth of ``points`` [P,3] it sees (in front of it and inside its image):
    the distance of what it looks at. ``fallback`` for a camera that sees none. float64 [N]."""
    points = points.detach().double().cpu()
    points = points[:: max(1, len(points) // 20000)]  # a median needs no more
    out = []
    for camera in cameras:
        viewmat = camera.viewmat.detach().double().cpu()
        cam = points @ viewmat[:3, :3].T + viewmat[:3, 3]
        z = cam[:, 2]
        front = z > 1e-6
        uv = cam[front, :2] / z[front, None] @ camera.K[:2, :2].double().cpu().T + camera.K[:2, 2].double().cpu()
        inside = (uv[:, 0] >= 0) & (uv[:, 0] < camera.width) & (uv[:, 1] >= 0) & (uv[:, 1] < camera.height)
        seen = z[front][inside]
        out.append(float(seen.median()) if len(seen) else fallback)
    return torch.tensor(out, dtype=torch.float64)


def similarity_directions(viewmats: Tensor, depths: Tensor) -> Tensor:
    """[6N, 7]: the first-order change of the corrections (:class:`SE3PoseRefinement`'s ``delta``,
    flattened) of cameras ``viewmats`` [N,4,4] when the whole scene turns about a world axis (3),
    scales (1) or shifts along a world axis (3) and the cameras follow it, seeing the same images.

    A world motion ``x -> x + w x x + s x + v`` seen by the camera ``[R | t]`` is the camera-frame
    correction ``[I + [phi]_x | u]`` with ``phi = -R w`` and ``u = (R w) x t + s t - R v`` (the
    scale shows as a uniform scale of camera coordinates, which projects to the same image).
    """
    viewmats = viewmats.double()
    rotation, translation = viewmats[:, :3, :3], viewmats[:, :3, 3]
    n = len(viewmats)
    pivot = torch.zeros(n, 3, dtype=torch.float64)
    pivot[:, 2] = depths
    zeros = torch.zeros(n, 3, dtype=torch.float64)
    columns = []
    for k in range(7):
        axis = torch.zeros(3, dtype=torch.float64)
        if k < 3:  # a turn about world axis k
            axis[k] = 1.0
            turned = rotation @ axis
            phi, u = -turned, torch.linalg.cross(turned, translation, dim=-1)
        elif k == 3:  # a scale about the world origin
            phi, u = zeros, translation
        else:  # a shift along world axis k - 4
            axis[k - 4] = 1.0
            phi, u = zeros, -(rotation @ axis)
        # C's translation p - R(w) p + d tau is -phi x p + d tau to first order
        tau = (u + torch.linalg.cross(phi, pivot, dim=-1)) / depths[:, None]
        columns.append(torch.cat([phi, tau], dim=1).reshape(-1))
    return torch.stack(columns, dim=1)


def common_orbit_directions(n_views: int) -> Tensor:
    """[6N, 2]: every view's correction (:class:`SE3PoseRefinement`'s ``delta``, flattened) orbiting
    its camera by the same angle about its own x axis (up or down, towards the image's top or bottom)
    and about its own y axis (sideways): the mean orbit over views."""
    return torch.eye(6, dtype=torch.float64)[:, :2].repeat(n_views, 1)


def orthonormal_basis(directions: Tensor) -> Tensor:
    """An orthonormal basis [M, r] of the span of ``directions`` [M, K]; directions that a degenerate
    camera layout makes dependent count once."""
    u, s, _ = torch.linalg.svd(directions, full_matrices=False)
    return u[:, : int((s > s[0] * 1e-9).sum())] if len(s) and s[0] > 0 else u[:, :0]


@POSE_OPT.register("se3")
class SE3PoseRefinement(ViewCorrection):
    """A rotation ``w_i`` (axis-angle, radians) and a translation ``tau_i`` per training view ``i``,
    starting at zero, applied in its camera frame as ``viewmat_i' = C_i @ viewmat_i`` with
    ``C_i = [R(w_i) | p_i - R(w_i) p_i + d_i tau_i]``, where ``p_i = (0, 0, d_i)`` is the point on the
    optical axis at the depth ``d_i`` of what the camera sees (the median depth of the initial
    Gaussians in its view).

    So ``w`` turns the camera about the scene it looks at rather than about its own centre, and
    ``tau`` (in units of ``d_i``, so in radians of image shift, like ``w``) moves it: a sideways move
    and a turn back, which the images hardly tell apart at a distance, are one parameter each
    (the orbit ``w_x``, ``w_y``) instead of a near-cancelling pair, so Adam's per-parameter step sizes
    fit each. After every update, the part of the corrections that a motion of the whole scene
    (a turn, scale or shift of everything, which the training images cannot see) would explain is
    removed: the cameras stay in the frame of the given poses, as the test views, the sparse points
    and exports do, and the scene, learned from the same poses, stays there with them. So is their
    mean orbit (:func:`common_orbit_directions`): every camera orbiting the same way, with the
    scene deformed to match, is seen only through small parallax, and the corrections drift along
    it; pose errors independent from view to view have none of it.

    Needs a renderer that passes gradients to the camera poses (cpu, torch, gsplat).

    Args:
        lr, lr_final: Adam learning rate, decayed exponentially to ``lr_final`` at the last step.
        weight_decay: pulls every correction towards zero (gsplat's pose_opt_reg).
        l1: weight of the corrections' absolute values (summed over a view's six, mean over the
            step's views) added to the loss: a parameter leaves zero only where the loss's gradient
            on it exceeds ``l1`` (loss per radian), so poses the images do not clearly contradict
            stay as given and the others move by less the more it is.
        start: fraction of the run before the poses move (on a random start, poses learned
            before the scene has a shape wander off).
        start_step: the step after which the poses move, however long the run (overrides
            ``start``): e.g. the step densification ends by.
        stop_step: the step after which the poses are kept as learned (null: learned to the end).
    """

    def __init__(self, n_views: int, lr: float = 1e-3, lr_final: float = 1e-4, weight_decay: float = 1e-6,
                 start: float = 0.1, start_step: Optional[int] = None, stop_step: Optional[int] = None,
                 l1: float = 0.0) -> None:
        super().__init__(n_views, lr, lr_final, weight_decay, start, start_step, stop_step)
        if isinstance(l1, bool) or not (isinstance(l1, (int, float)) and l1 >= 0):
            raise ConfigError(f"SE3PoseRefinement l1 is {l1!r}: use a weight >= 0")
        self.l1 = float(l1)
        self.delta = torch.nn.Parameter(torch.zeros(n_views, 6))  # [w | tau]
        self.register_buffer("depths", torch.ones(n_views))  # d_i, saved: the corrections' meaning
        self.register_buffer("given", torch.zeros(0, 4, 4), persistent=False)  # the cameras, from setup
        self._gauge: Optional[Tensor] = None  # orthonormal basis [6N, r] of the directions removed

    def setup(self, cameras: List[Camera], points: Tensor, scene_scale: float) -> None:
        """Pivot depths from the initial Gaussians ``points`` (``scene_scale`` where a camera sees none)."""
        self.depths = pivot_depths(cameras, points, scene_scale).to(self.depths)
        self.given = torch.stack([c.viewmat.detach() for c in cameras]).to(self.depths)
        self._gauge = None

    def load_state_dict(self, state_dict: Mapping[str, Tensor], strict: bool = True, assign: bool = False):
        """As :meth:`torch.nn.Module.load_state_dict`; the pivot depths may change with it."""
        self._gauge = None
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def after_update(self) -> None:
        """Remove the part of the corrections that a motion of the whole scene or a common orbit
        explains (their orthogonal projection, in parameter space, off :func:`similarity_directions`
        and :func:`common_orbit_directions`)."""
        if len(self.given) != self.n_views:
            return
        if self._gauge is None:
            directions = torch.cat([similarity_directions(self.given.cpu(), self.depths.double().cpu()),
                                    common_orbit_directions(self.n_views)], dim=1)
            self._gauge = orthonormal_basis(directions).to(self.delta)
        with torch.no_grad():
            flat = self.delta.view(-1)
            flat -= self._gauge @ (self._gauge.T @ flat)

    def regularization(self, view_ids: Tensor) -> Optional[Tensor]:
        """``l1`` times the batch views' absolute corrections (None when ``l1`` is 0)."""
        if not self.l1:
            return None
        return self.l1 * self.delta[view_ids.to(self.delta.device)].abs().sum(dim=-1).mean()

    def transforms(self, view_ids: Tensor) -> Tensor:
        """The corrections [C,4,4] of training views ``view_ids``."""
        view_ids = view_ids.to(self.delta.device)
        delta = self.delta[view_ids]
        depth = self.depths[view_ids].to(delta.dtype)[:, None]
        rotation = so3_exp(delta[:, :3])
        pivot = torch.cat([torch.zeros_like(delta[:, :2]), depth], dim=1)
        out = torch.eye(4, device=delta.device).repeat(len(delta), 1, 1)
        out[:, :3, :3] = rotation
        out[:, :3, 3] = pivot - (rotation @ pivot[:, :, None])[..., 0] + depth * delta[:, 3:]
        return out

    def apply(self, cameras: List[Camera], view_ids: Tensor) -> List[Camera]:
        """Copies of ``cameras`` with corrected (differentiable) viewmats."""
        corrections = self.transforms(view_ids)
        return [
            Camera(viewmat=corrections[k].to(c.viewmat.device) @ c.viewmat, K=c.K, width=c.width, height=c.height,
                   name=c.name)
            for k, c in enumerate(cameras)
        ]

    def report(self) -> Dict[str, float]:
        """Mean and largest correction: rotation in degrees, camera-centre movement in scene units."""
        with torch.no_grad():
            degrees = self.delta[:, :3].norm(dim=-1) * (180.0 / math.pi)
            # the centre moves by R^T C_R^T C_t: rotations keep lengths, so by |C_t|
            moved = self.transforms(torch.arange(self.n_views))[:, :3, 3].norm(dim=-1)
            return {
                "pose_rot_deg_mean": float(degrees.mean()), "pose_rot_deg_max": float(degrees.max()),
                "pose_trans_mean": float(moved.mean()), "pose_trans_max": float(moved.max()),
            }
