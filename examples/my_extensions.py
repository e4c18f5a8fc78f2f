"""An example user module: one custom hook (a custom writer is in examples/my_writer.py).

Load it from a config with ``imports: [examples/my_extensions.py]`` (a path relative to
the working directory or to the config file, or a dotted module name on sys.path).
"""

from __future__ import annotations

from typing import Any, Dict

from splattrain import HOOKS, Hook
from splattrain.steps import Steps


@HOOKS.register()
class OpacityStatsHook(Hook):
    """Logs the mean opacity and the share of nearly transparent Gaussians every N steps."""

    priority = "LOW"

    def __init__(self, interval: Steps = 100, threshold: float = 0.05) -> None:
        super().__init__()
        self.interval = interval
        self.threshold = threshold

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        if not self.every_n_steps(trainer, self.interval):
            return
        opacities = trainer.model.opacities.detach()
        trainer.writers.write_scalars(
            {
                "opacity/mean": float(opacities.mean()),
                "opacity/transparent_share": float((opacities < self.threshold).float().mean()),
            },
            step,
        )

