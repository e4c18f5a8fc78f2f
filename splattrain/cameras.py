"""Pinhole cameras in the OpenCV convention (x right, y down, z forward)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor


@dataclass
class Camera:
    """One pinhole camera.

    Attributes:
        viewmat: world-to-camera transform, float32 [4, 4] (OpenCV axes).
        K: intrinsics in pixels, float32 [3, 3].
        width, height: image size in pixels.
        name: the view's name (file stem), used in logs and image names.
    """

    viewmat: Tensor
    K: Tensor
    width: int
    height: int
    name: str = ""

    def to(self, device: torch.device | str) -> "Camera":
        """A copy with tensors on ``device``."""
        return replace(self, viewmat=self.viewmat.to(device), K=self.K.to(device))

    @property
    def center(self) -> Tensor:
        """Camera centre in world coordinates [3]."""
        R = self.viewmat[:3, :3]
        t = self.viewmat[:3, 3]
        return -R.T @ t

    def scaled(self, factor: float) -> "Camera":
        """The same camera for an image resized by ``factor`` (0.5 = half size)."""
        K = self.K.clone()
        K[:2] *= factor
        return replace(
            self,
            K=K,
            width=max(1, int(round(self.width * factor))),
            height=max(1, int(round(self.height * factor))),
        )


def stack_cameras(cameras: list[Camera]) -> tuple[Tensor, Tensor, int, int]:
    """Stack same-sized cameras into (viewmats [C,4,4], Ks [C,3,3], width, height)."""
    if not cameras:
        raise ValueError("no cameras to stack")
    width, height = cameras[0].width, cameras[0].height
    if any(c.width != width or c.height != height for c in cameras):
        raise ValueError("cameras rendered together must share one image size")
    if len(cameras) == 1:  # a view, not a copy: a training step's usual case
        return cameras[0].viewmat.unsqueeze(0), cameras[0].K.unsqueeze(0), width, height
    viewmats = torch.stack([c.viewmat for c in cameras])
    Ks = torch.stack([c.K for c in cameras])
    return viewmats, Ks, width, height
