"""An example user module: one custom hook and one custom writer.

Load it from a config with ``imports: [examples/my_extensions.py]`` (a path relative to
the working directory or to the config file, or a dotted module name on sys.path).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Dict, Mapping

from splattrain import HOOKS, WRITERS, Hook, Writer


@HOOKS.register()
class OpacityStatsHook(Hook):
    """Logs the mean opacity and the share of nearly transparent Gaussians every N steps."""

    priority = "LOW"

    def __init__(self, interval: int = 100, threshold: float = 0.05) -> None:
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


@WRITERS.register()
class CsvScalarWriter(Writer):
    """Appends every scalar as a 'step,tag,value' row to scalars.csv in the run directory."""

    def __init__(self, run_dir: str | Path, filename: str = "scalars.csv") -> None:
        super().__init__(run_dir)
        self._file = open(self.run_dir / filename, "a", newline="", encoding="utf-8")
        self._csv = csv.writer(self._file)

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        for tag, value in scalars.items():
            self._csv.writerow([step, tag, float(value)])

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
