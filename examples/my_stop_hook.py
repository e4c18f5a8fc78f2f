"""A hook that steers the run: stop once the test PSNR reaches a target (docs/hooks.md).

Use it from a config with ``imports: [examples/my_stop_hook.py]`` and
``custom_hooks: [{type: StopAtTargetHook, target: 30.0}]``.
"""

from __future__ import annotations

from typing import Any, Dict

from splattrain import HOOKS, Hook, Trainer


@HOOKS.register()
class StopAtTargetHook(Hook):
    """Ends the run after the first validation whose ``metric`` reaches ``target``.

    Args:
        target: the value to reach.
        metric: a key of the validation metrics (psnr, ssim; higher is better).
    """

    def __init__(self, target: float, metric: str = "psnr") -> None:
        super().__init__()
        self.target, self.metric = target, metric

    def after_val(self, trainer: Trainer, metrics: Dict[str, Any]) -> None:
        if metrics[self.metric] >= self.target:
            trainer.request_stop(f"{self.metric} {metrics[self.metric]:.2f} reached the target {self.target:g}")
