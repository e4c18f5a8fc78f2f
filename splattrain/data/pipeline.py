"""Training and test batches from a loaded scene."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional

import numpy as np
import torch
from torch import Tensor

from ..cameras import Camera
from .prefetch import Prefetcher
from .types import Frame, SceneData
from .views import downscaled_frame


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


def _to_float_host(image: np.ndarray, background: np.ndarray) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """:func:`_to_float` in NumPy, with the same float32 results.

    The prefetch thread converts with this: a PyTorch operation on a second long-lived thread
    starts a second OpenMP thread team, and with more OpenMP threads than cores libgomp stops
    spinning between parallel regions, so every later PyTorch operation of the training loop
    waits for its threads to wake up (about 6x slower small operations on a 2-core machine).
    """
    x = image.astype(np.float32) / np.float32(255.0)
    if x.shape[-1] == 4:
        rgb, alpha = x[..., :3], x[..., 3:]
        return rgb * alpha + background * (np.float32(1.0) - alpha), alpha
    return x, None


class DataPipeline:
    """Serves shuffled training views (one epoch permutation at a time), the test views and the
    validation views (``scene.val``: training views held out by ``data.val_split``, never served
    for training).

    Images stay uint8 on the CPU (the scene's arrays, not copies) and are converted per
    batch. With ``prefetch`` the next training batch is prepared on a background thread
    while the current step runs. The view order (and, with ``random_background``, the
    background colour of each step) comes from the pipeline's own seeded generator,
    drawn on the caller's thread, so batches do not depend on prefetching and the
    state saved in checkpoints resumes the exact sequence.

    Batches: ``image`` float [C,H,W,3] (RGBA composited over ``background``), ``alpha``
    [C,H,W,1] for RGBA data, ``mask`` bool [C,H,W,1] when the views have masks, ``depth`` float
    [C,H,W,1] when they have depth maps (0: unknown),
    ``background`` [3] (the colour used), ``camera`` (list), ``image_id`` [C]; training batches
    also ``step`` (the training step they are for, an int). A training batch
    holds ``views`` views (C), drawn in turn from the epoch order, over one background.
    ``world_transform`` (float64 [4,4]) maps the dataset's world frame to the cameras' frame.

    Several ranks: each step draws ``views`` x ``world_size`` views from the one global order
    (the same whatever the world size) and rank ``rank`` takes the ``rank``-th run of ``views``.
    """

    def __init__(
        self,
        scene: SceneData,
        background: Tensor,
        device: torch.device,
        seed: int = 0,
        random_background: bool = False,
        prefetch: bool = True,
        views: int = 1,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.scene = scene
        self.views = views
        self.rank = rank
        self.world_size = world_size
        self.train_frames = scene.train
        self.train_downscale = 1.0  #: the training views' shrink factor on top of the loaded resolution
        self.test_frames = scene.test
        self.val_frames = scene.val  #: the training views ``data.val_split`` keeps out of training
        self.device = device
        self.background = background.to(device)
        self.random_background = random_background
        self.world_transform = torch.as_tensor(scene.extra.get("world_transform", np.eye(4)), dtype=torch.float64)
        self._generator = torch.Generator().manual_seed(seed)
        self._order: List[int] = []
        self._position = 0
        self._prefetcher: Optional[Prefetcher[Dict[str, Any]]] = Prefetcher() if prefetch else None
        self._saved = self._view_state()
        self._convert_in_worker = device.type == "cpu"

    @property
    def has_depths(self) -> bool:
        """Whether any training view has a depth map (the ``depth`` loss term needs one)."""
        return any(f.depth is not None for f in self.train_frames)

    @property
    def train_cameras(self) -> List[Camera]:
        return [f.camera for f in self.train_frames]

    def _next_index(self) -> int:
        if self._position >= len(self._order):
            self._order = torch.randperm(len(self.train_frames), generator=self._generator, device="cpu").tolist()
            self._position = 0
        index = self._order[self._position]
        self._position += 1
        return index

    def _draw(self) -> tuple[List[int], Tensor]:
        """The next training views and their background colour (on the caller's thread)."""
        indices = [self._next_index() for _ in range(self.views * self.world_size)]
        indices = indices[self.rank * self.views : (self.rank + 1) * self.views]
        if self.random_background:
            return indices, torch.rand(3, generator=self._generator)
        return indices, self.background

    def _gather(self, frames: List[Frame], indices: List[int], background: Tensor) -> Dict[str, Any]:
        """A batch of uint8 host tensors (pinned for CUDA), converted too when the device is the CPU."""
        image = torch.from_numpy(np.stack([frames[i].pixels() for i in indices]))
        masks = [frames[i].mask for i in indices]
        batch: Dict[str, Any] = {
            "image": image.pin_memory() if self.device.type == "cuda" else image,
            "camera": [frames[i].camera for i in indices],
            "image_id": torch.tensor(indices, dtype=torch.long),
            "background": background,
        }
        if any(m is not None for m in masks):
            full = np.ones(image.shape[1:3], dtype=bool)
            batch["mask"] = torch.from_numpy(np.stack([full if m is None else m for m in masks]))[..., None]
        depths = [frames[i].depth for i in indices]
        if any(d is not None for d in depths):
            unknown = np.zeros(image.shape[1:3], dtype=np.float32)
            batch["depth"] = torch.from_numpy(np.stack([unknown if d is None else d for d in depths]))[..., None]
        return self._convert_on_host(batch) if self._convert_in_worker else batch

    def _convert_on_host(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        """:meth:`_convert` for the CPU, in NumPy, so the prefetch thread runs no PyTorch kernels."""
        rgb, alpha = _to_float_host(batch["image"].numpy(), batch["background"].numpy().astype(np.float32))
        out = {**batch, "image": torch.from_numpy(rgb)}
        if alpha is not None:
            out["alpha"] = torch.from_numpy(alpha)
        return out

    def _convert(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        """Move a gathered batch to the device and turn its image into composited floats."""
        background = batch["background"].to(self.device)
        rgb, alpha = _to_float(batch["image"].to(self.device, non_blocking=True), background)
        out: Dict[str, Any] = {
            "image": rgb,
            "camera": [camera.to(self.device) for camera in batch["camera"]],
            "image_id": batch["image_id"],
            "background": background,
        }
        if alpha is not None:
            out["alpha"] = alpha
        for key in ("mask", "depth"):
            if key in batch:
                out[key] = batch[key].to(self.device, non_blocking=True)
        return out

    def next_train(self, step: int) -> Dict[str, Any]:
        """The batch for training step ``step`` (see the class docstring for its keys)."""
        if self._prefetcher is None:
            batch = self._gather(self.train_frames, *self._draw())
        else:
            if not self._prefetcher.pending:
                self._prefetcher.submit(self._gather, self.train_frames, *self._draw())
            batch = self._prefetcher.take()
            self._saved = self._view_state()
            self._prefetcher.submit(self._gather, self.train_frames, *self._draw())
        batch = batch if self._convert_in_worker else self._convert(batch)
        batch["step"] = step
        return batch

    def test_batches(self) -> Iterator[Dict[str, Any]]:
        """One batch per test view, in order, over the fixed ``background``."""
        for index in range(len(self.test_frames)):
            batch = self._gather(self.test_frames, [index], self.background)
            yield batch if self._convert_in_worker else self._convert(batch)

    def val_batches(self) -> Iterator[Dict[str, Any]]:
        """One batch per validation view (``data.val_split``), in order, over the fixed ``background``."""
        for index in range(len(self.val_frames)):
            batch = self._gather(self.val_frames, [index], self.background)
            yield batch if self._convert_in_worker else self._convert(batch)

    def train_view_batches(self, count: int) -> Iterator[Dict[str, Any]]:
        """``count`` training views spread evenly over them (the same ones each time), one batch
        each at the loaded resolution over the fixed ``background``: what the scene has learnt of
        the photos it trains on."""
        frames = self.scene.train
        chosen = sorted({int((j + 0.5) * len(frames) / count) for j in range(min(count, len(frames)))})
        for index in chosen:
            batch = self._gather(frames, [index], self.background)
            yield batch if self._convert_in_worker else self._convert(batch)

    def _view_state(self) -> Dict[str, Any]:
        return {"generator": self._generator.get_state(), "order": list(self._order), "position": self._position}

    def state_dict(self) -> Dict[str, Any]:
        """The view-order state after the last batch served (a prefetched batch is not counted)."""
        state = self._saved if self._prefetcher is not None and self._prefetcher.pending else self._view_state()
        return {**state, "world_transform": self.world_transform.clone()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if self._prefetcher is not None:
            self._prefetcher.discard()
        self._generator.set_state(state["generator"])
        self._order = list(state["order"])
        self._position = int(state["position"])
        self._saved = self._view_state()

    def set_train_downscale(self, factor: float) -> None:
        """Serve the training views shrunk by ``factor`` (1: as loaded; intrinsics follow) from the
        next batch on, in the same view order (a batch prefetched at the old size is dropped); the
        test views keep the loaded resolution."""
        if not factor >= 1:
            raise ValueError(f"a training downscale factor must be >= 1, not {factor}")
        if factor == self.train_downscale:
            return
        state = self.state_dict()
        self.train_frames = [downscaled_frame(frame, factor) for frame in self.scene.train]
        self.load_state_dict(state)
        self.train_downscale = float(factor)

    def close(self) -> None:
        """Stop the prefetch thread."""
        if self._prefetcher is not None:
            self._prefetcher.close()
