"""Training and test batches from a loaded scene."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from ..cameras import Camera
from .types import Frame, SceneData


def resize_frame(frame: Frame, downscale: float) -> Frame:
    """``frame`` with its image shrunk by ``downscale`` and intrinsics scaled to match."""
    if downscale == 1.0:
        return frame
    height, width = frame.image.shape[:2]
    new_w = max(1, int(round(width / downscale)))
    new_h = max(1, int(round(height / downscale)))
    image = np.asarray(Image.fromarray(frame.image).resize((new_w, new_h), Image.Resampling.BOX))
    camera = frame.camera
    K = camera.K.clone()
    K[0] *= new_w / width
    K[1] *= new_h / height
    camera = Camera(viewmat=camera.viewmat, K=K, width=new_w, height=new_h, name=camera.name)
    return Frame(image=image, camera=camera, name=frame.name)


def focus_point(cameras: List[Camera]) -> Tensor:
    """The point closest (least squares) to every camera's optical axis [3]."""
    A = torch.zeros(3, 3, dtype=torch.float64)
    b = torch.zeros(3, dtype=torch.float64)
    for cam in cameras:
        center = cam.center.double()
        axis = cam.viewmat[2, :3].double()  # camera z axis in world coordinates
        axis = axis / axis.norm()
        P = torch.eye(3, dtype=torch.float64) - torch.outer(axis, axis)
        A += P
        b += P @ center
    try:
        return torch.linalg.solve(A, b).float()
    except RuntimeError:  # parallel axes: fall back to the cameras' mean position
        return torch.stack([c.center for c in cameras]).mean(0)


def camera_scene_scale(cameras: List[Camera]) -> float:
    """1.1 x the largest distance of a camera from the cameras' mean position (gsplat's rule)."""
    centers = torch.stack([c.center for c in cameras])
    return float((centers - centers.mean(0)).norm(dim=1).max()) * 1.1


def _to_float(image: Tensor, background: Tensor) -> tuple[Tensor, Optional[Tensor]]:
    """uint8 [C,H,W,3|4] -> float RGB composited over ``background``, and alpha or None."""
    x = image.float() / 255.0
    if x.shape[-1] == 4:
        rgb, alpha = x[..., :3], x[..., 3:]
        return rgb * alpha + background * (1.0 - alpha), alpha
    return x, None


class DataPipeline:
    """Serves shuffled training views (one epoch permutation at a time) and the test views.

    Images stay uint8 on the CPU and are converted per batch. The view order comes from
    its own seeded generator, saved in checkpoints so a resumed run sees the same views.
    """

    def __init__(
        self, scene: SceneData, background: Tensor, device: torch.device, seed: int = 0, downscale: float = 1.0
    ) -> None:
        self.scene = scene
        self.train_frames = [resize_frame(f, downscale) for f in scene.train]
        self.test_frames = [resize_frame(f, downscale) for f in scene.test]
        self.device = device
        self.background = background.to(device)
        self._train_images = [torch.from_numpy(np.array(f.image)) for f in self.train_frames]
        self._test_images = [torch.from_numpy(np.array(f.image)) for f in self.test_frames]
        self._generator = torch.Generator().manual_seed(seed)
        self._order: List[int] = []
        self._position = 0

    @property
    def train_cameras(self) -> List[Camera]:
        return [f.camera for f in self.train_frames]

    def _next_index(self) -> int:
        if self._position >= len(self._order):
            self._order = torch.randperm(len(self.train_frames), generator=self._generator).tolist()
            self._position = 0
        index = self._order[self._position]
        self._position += 1
        return index

    def _batch(self, frames: List[Frame], images: List[Tensor], indices: List[int]) -> Dict[str, Any]:
        image = torch.stack([images[i] for i in indices]).to(self.device)
        rgb, alpha = _to_float(image, self.background)
        batch: Dict[str, Any] = {
            "image": rgb,
            "camera": [frames[i].camera.to(self.device) for i in indices],
            "image_id": torch.tensor(indices, dtype=torch.long),
        }
        if alpha is not None:
            batch["alpha"] = alpha
        return batch

    def next_train(self, step: int) -> Dict[str, Any]:
        """The batch for training step ``step``: image [1,H,W,3], alpha?, camera [list], image_id."""
        return self._batch(self.train_frames, self._train_images, [self._next_index()])

    def test_batches(self) -> Iterator[Dict[str, Any]]:
        """One batch per test view, in order."""
        for index in range(len(self.test_frames)):
            yield self._batch(self.test_frames, self._test_images, [index])

    def state_dict(self) -> Dict[str, Any]:
        return {"generator": self._generator.get_state(), "order": list(self._order), "position": self._position}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self._generator.set_state(state["generator"])
        self._order = list(state["order"])
        self._position = int(state["position"])
