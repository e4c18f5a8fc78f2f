"""Per-view pose refinement: a learned SE(3) correction of each training camera (as gsplat's pose_opt)."""

from __future__ import annotations

import math
from typing import Dict, List

import torch
from torch import Tensor

from ..cameras import Camera
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


@POSE_OPT.register("se3")
class SE3PoseRefinement(ViewCorrection):
    """``viewmat_i' = [R(w_i) | t_i] @ viewmat_i``: a rotation ``w_i`` (axis-angle, radians) and a
    translation ``t_i`` (scene units) in the camera frame of training view ``i``, starting at zero.

    Needs a renderer that passes gradients to the camera poses (cpu, torch, gsplat).

    Args:
        lr, lr_final: Adam learning rate, decayed exponentially to ``lr_final`` at the last step.
        weight_decay: pulls every correction towards zero (gsplat's pose_opt_reg).
        start: fraction of the run before the poses move (on a random start, poses learned
            before the scene has a shape wander off).
    """

    def __init__(self, n_views: int, lr: float = 1e-3, lr_final: float = 1e-5, weight_decay: float = 1e-6,
                 start: float = 0.1) -> None:
        super().__init__(n_views, lr, lr_final, weight_decay, start)
        self.delta = torch.nn.Parameter(torch.zeros(n_views, 6))  # [w | t]

    def transforms(self, view_ids: Tensor) -> Tensor:
        """The corrections [C,4,4] of training views ``view_ids``."""
        delta = self.delta[view_ids.to(self.delta.device)]
        out = torch.eye(4, device=delta.device).repeat(len(delta), 1, 1)
        out[:, :3, :3] = so3_exp(delta[:, :3])
        out[:, :3, 3] = delta[:, 3:]
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
            moved = self.delta[:, 3:].norm(dim=-1)  # |centre shift| = |t|: rotations keep lengths
            return {
                "pose_rot_deg_mean": float(degrees.mean()), "pose_rot_deg_max": float(degrees.max()),
                "pose_trans_mean": float(moved.mean()), "pose_trans_max": float(moved.max()),
            }
