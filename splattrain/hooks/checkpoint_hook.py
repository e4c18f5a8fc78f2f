"""CheckPointHook: resumable checkpoints, the best one, 3DGS PLY files and the published scene."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple, Union

from ..errors import ConfigError
from ..io.gaussians_file import FORMATS
from ..registry import HOOKS
from ..steps import Steps
from . import state as state_values
from .base import Hook, Priority
from .splits import check_split, metric_key

_GREATER_IS_BETTER = {"psnr": True, "ssim": True, "lpips": False}


@HOOKS.register()
class CheckPointHook(Hook):
    """Saves ckpt/step_XXXXXX.pt (+ last.pt, best.pt) and ply/step_XXXXXX.ply.

    Args:
        interval: save a checkpoint every N steps (0: never periodically).
        save_begin: no periodic checkpoint before this step.
        max_keep: keep at most this many step checkpoints, removing the oldest (<= 0: keep all).
        save_last: always save at the last step.
        save_best: None, 'auto' (psnr) or a validation metric name; keeps ckpt/best.pt.
        rule: 'greater' or 'less' for save_best (inferred for psnr, ssim, lpips).
        split: the views save_best follows: ``test`` (the test views) or ``val`` (the views
            ``data.val_split`` holds out of training: the best state of a run that starts to
            over-fit is kept without the test views choosing it).
        ply_interval: write ply/step_XXXXXX.ply every N steps (None: with each checkpoint;
            0: only at the last step).
        publish: at the end, also write ckpt/published.pt (Gaussians and config, no optimizer
            state) and the scene in the run directory in each of ``publish_format``.
        publish_format: one format or a list of them: ply (scene.ply), ply-compressed
            (scene.compressed.ply), spz (scene.spz), splat (scene.splat).

    Where checkpoints go is the run's ``checkpoint_dir`` (default ``<output_dir>/ckpt``). The hook
    asks (``trainer.request_checkpoint``); the trainer writes each checkpoint after the step and
    its validation, so ``step_XXXXXX.pt`` holds what that validation changed (this hook's best
    value, an early stop's patience) and a resumed run goes on as the straight one.
    """

    priority = Priority.VERY_LOW

    def __init__(
        self,
        interval: Steps = 1000,
        save_begin: Steps = 0,
        max_keep: int = -1,
        save_last: bool = True,
        save_best: Optional[str] = None,
        rule: Optional[str] = None,
        ply_interval: Optional[Steps] = None,
        publish: bool = False,
        publish_format: Union[str, List[str]] = "ply",
        split: str = "test",
    ) -> None:
        super().__init__()
        self.interval = interval
        self.save_begin = save_begin
        self.max_keep = max_keep
        self.save_last = save_last
        self.metric = "psnr" if save_best == "auto" else save_best
        self.greater = self._infer_rule(self.metric, rule)
        self.key = None if self.metric is None else metric_key(self.metric, split, "CheckPointHook")
        self.ply_interval = ply_interval
        self.publish = publish
        self.publish_formats = [publish_format] if isinstance(publish_format, str) else list(publish_format)
        unknown = [fmt for fmt in self.publish_formats if fmt not in FORMATS]
        if unknown or not self.publish_formats:
            raise ConfigError(f"CheckPointHook publish_format {unknown or publish_format!r}: use {', '.join(FORMATS)}")
        self.best_value: Optional[float] = None
        self.best_step: Optional[int] = None

    @staticmethod
    def _infer_rule(metric: Optional[str], rule: Optional[str]) -> bool:
        if metric == "loss":
            raise ConfigError("CheckPointHook save_best 'loss': validation does not measure the training loss; "
                              "use psnr, ssim or lpips")
        if rule is not None:
            if rule not in ("greater", "less"):
                raise ConfigError(f"CheckPointHook rule {rule!r}: use 'greater' or 'less'")
            return rule == "greater"
        if metric is None:
            return True
        if metric not in _GREATER_IS_BETTER:
            raise ConfigError(f"CheckPointHook save_best {metric!r}: give rule: greater|less for this metric")
        return _GREATER_IS_BETTER[metric]

    def required_metrics(self) -> Tuple[str, ...]:
        return () if self.metric is None else (self.metric,)

    def check(self, trainer) -> None:
        if self.key is not None:
            check_split(self.key, trainer)

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        last = self.save_last and self.is_last_step(trainer)
        saved = (step >= self.save_begin and self.every_n_steps(trainer, self.interval)) or last
        if saved:
            trainer.request_checkpoint(keep_last=max(self.max_keep, 0))
        ply_due = saved if self.ply_interval is None else (self.every_n_steps(trainer, self.ply_interval) or last)
        if ply_due:
            trainer.export_scene(f"ply/step_{step:06d}.ply", "ply")

    def after_val(self, trainer, metrics: Dict[str, Any]) -> None:
        if self.key is None:
            return
        value = metrics.get(self.key)
        if value is None or not math.isfinite(value):
            trainer.console.warning(f"save_best: no {self.key} value in the validation at step {trainer.step}; "
                                    "best.pt is not updated", once="save_best")
            return
        if self.best_value is None or (value > self.best_value if self.greater else value < self.best_value):
            self.best_value, self.best_step = float(value), trainer.step
            trainer.request_checkpoint("best")
            trainer.console.info(f"new best {self.key} {value:.4f} at step {trainer.step} -> "
                                 f"{trainer.checkpoint_dir / 'best.pt'}")

    def after_train(self, trainer) -> None:
        if self.publish:
            path = trainer.publish(self.publish_formats)
            if path is not None:
                names = ", ".join(f"scene.{FORMATS[fmt]}" for fmt in self.publish_formats)
                trainer.console.info(f"published {path} and {names} in {trainer.run_dir}")

    def state_dict(self) -> Dict[str, Any]:
        if self.best_value is None:
            return {}
        return {"best_value": self.best_value, "best_step": self.best_step}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.best_value = state_values.number(state, "best_value", None, optional=True)
        self.best_step = state_values.whole(state, "best_step", None, optional=True, minimum=0)
