"""CheckPointHook: resumable checkpoints and standard 3DGS PLY files."""

from __future__ import annotations

from typing import Any, Dict

from ..io.ply import write_ply
from ..registry import HOOKS
from .base import Hook, Priority


@HOOKS.register()
class CheckPointHook(Hook):
    """Saves ckpt/step_XXXXXX.pt (and ckpt/last.pt) plus ply/step_XXXXXX.ply.

    Args:
        interval: save every N steps (0: only at the end).
        save_ply: also write the scene as a PLY each time.
        save_last: always save at the last step.
    """

    priority = Priority.VERY_LOW

    def __init__(self, interval: int = 1000, save_ply: bool = True, save_last: bool = True) -> None:
        super().__init__()
        self.interval = interval
        self.save_ply = save_ply
        self.save_last = save_last

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        if self.every_n_steps(trainer, self.interval) or (self.save_last and self.is_last_step(trainer)):
            self.save(trainer)

    def save(self, trainer) -> None:
        """Write the checkpoint (and PLY) for the current step."""
        stem = f"step_{trainer.step:06d}"
        path = trainer.save_checkpoint(trainer.run_dir / "ckpt" / f"{stem}.pt")
        message = f"saved checkpoint {path}"
        if self.save_ply:
            ply = trainer.run_dir / "ply" / f"{stem}.ply"
            write_ply(ply, trainer.model.params)
            message += f" and {ply}"
        trainer.console.debug(message)
