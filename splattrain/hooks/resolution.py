"""ResolutionScheduleHook: coarse-to-fine training, the training views shrunk by a schedule."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from ..errors import ConfigError
from ..registry import HOOKS
from ..steps import scale_count
from .base import Hook, Priority


@HOOKS.register()
class ResolutionScheduleHook(Hook):
    """Trains on smaller images first: ``schedule`` is a list of [start_step, factor] pairs.

    The default ``[[0, 4], [500, 2], [1500, 1]]`` trains at 1/4 of the loaded resolution
    until step 500, at 1/2 until step 1500, then at full resolution. At each change the
    trainer serves the training views at the new size (intrinsics follow); validation always
    uses the configured resolution (``data.downscale``).
    """

    priority = Priority.VERY_HIGH
    sets_train_resolution = True

    DEFAULT = ((0, 4), (500, 2), (1500, 1))

    def __init__(self, schedule: Sequence[Sequence[float]] = DEFAULT) -> None:
        super().__init__()
        self.schedule: List[tuple[int, float]] = sorted((int(s), float(f)) for s, f in schedule)
        if not self.schedule or any(f < 1 for _, f in self.schedule):
            raise ConfigError("ResolutionScheduleHook schedule: [[step, factor >= 1], ...] with at least one entry")
        self.current = 1.0

    @classmethod
    def scale_steps(cls, options: Dict[str, Any], run: float, window: float, where: str) -> List[Tuple[str, Any, Any]]:
        """The schedule's start steps follow the run's length."""
        written = [list(pair) for pair in options.get("schedule", cls.DEFAULT)]
        scaled = [[scale_count(int(start), run) if start else 0, factor] for start, factor in written]
        if run == 1.0 or scaled == written:
            return []
        options["schedule"] = scaled
        return [(f"{where}.schedule", written, scaled)]

    def factor_at(self, step: int) -> float:
        """The downscale factor in force at ``step``."""
        factor = 1.0
        for start, value in self.schedule:
            if step >= start:
                factor = value
        return factor

    def before_train(self, trainer) -> None:
        self._apply(trainer, self.factor_at(trainer.step + 1))

    def before_train_iter(self, trainer, step: int, batch: Dict[str, Any]) -> None:
        # the batch of ``step`` is already drawn; the next one uses the new size
        factor = self.factor_at(step + 1)
        if factor != self.current:
            self._apply(trainer, factor)

    def _apply(self, trainer, factor: float) -> None:
        trainer.set_train_resolution(factor)
        self.current = factor
        frame = trainer.data.train_frames[0]
        trainer.console.info(
            f"step {trainer.step + 1}: training at 1/{factor:g} resolution "
            f"({frame.camera.width}x{frame.camera.height})"
        )
