"""ResolutionScheduleHook: coarse-to-fine training by reloading the views at new resolutions."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from ..cameras import Camera
from ..data.images import resize_image, resize_mask, scaled_size
from ..data.types import Frame
from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook, Priority


def downscaled_frame(frame: Frame, factor: float) -> Frame:
    """``frame`` shrunk by ``factor`` (1 = unchanged), intrinsics scaled to the new size."""
    if factor == 1:
        return frame
    width, height = frame.camera.width, frame.camera.height
    size = scaled_size(width, height, factor)
    K = frame.camera.K.clone()
    K[0] *= size[0] / width
    K[1] *= size[1] / height
    camera = Camera(viewmat=frame.camera.viewmat, K=K, width=size[0], height=size[1], name=frame.camera.name)
    mask = None if frame.mask is None else resize_mask(frame.mask, size)
    return Frame(image=resize_image(frame.pixels(), size), camera=camera, name=frame.name, mask=mask)


@HOOKS.register()
class ResolutionScheduleHook(Hook):
    """Trains on smaller images first: ``schedule`` is a list of [start_step, factor] pairs.

    The default ``[[0, 4], [500, 2], [1500, 1]]`` trains at 1/4 of the loaded resolution
    until step 500, at 1/2 until step 1500, then at full resolution. At each change the
    training views are reloaded at the new size (intrinsics follow); validation always
    uses the configured resolution (``data.downscale``).
    """

    priority = Priority.VERY_HIGH

    def __init__(self, schedule: Sequence[Sequence[float]] = ((0, 4), (500, 2), (1500, 1))) -> None:
        super().__init__()
        self.schedule: List[tuple[int, float]] = sorted((int(s), float(f)) for s, f in schedule)
        if not self.schedule or any(f < 1 for _, f in self.schedule):
            raise ConfigError("ResolutionScheduleHook schedule: [[step, factor >= 1], ...] with at least one entry")
        self.current = 1.0
        self._full: List[Frame] = []

    def factor_at(self, step: int) -> float:
        """The downscale factor in force at ``step``."""
        factor = 1.0
        for start, value in self.schedule:
            if step >= start:
                factor = value
        return factor

    def before_train(self, trainer) -> None:
        self._full = list(trainer.data.train_frames)
        self._apply(trainer, self.factor_at(trainer.step + 1))

    def before_train_iter(self, trainer, step: int, batch: Dict[str, Any]) -> None:
        # the batch of ``step`` is already drawn; the next one uses the new size
        factor = self.factor_at(step + 1)
        if factor != self.current:
            self._apply(trainer, factor)

    def _apply(self, trainer, factor: float) -> None:
        state = trainer.data.state_dict()
        trainer.data.train_frames = [downscaled_frame(frame, factor) for frame in self._full]
        trainer.data.load_state_dict(state)  # drops a batch prefetched at the old size
        self.current = factor
        frame = trainer.data.train_frames[0]
        trainer.console.info(
            f"step {trainer.step + 1}: training at 1/{factor:g} resolution "
            f"({frame.camera.width}x{frame.camera.height})"
        )
