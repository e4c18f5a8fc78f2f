"""DVCLive: local files that ``dvc plots`` and DVC Studio read (``pip install 'splattrain[dvclive]'``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Mapping

import numpy as np

from ..io.png import to_uint8
from ..registry import WRITERS
from .base import Writer
from .rows import scalar_row


@WRITERS.register("dvclive", aliases=("DvcliveWriter",))
class DvcliveWriter(Writer):
    """DVCLive files under <run_dir>/<folder>: plots/metrics/<tag>.tsv (step, value), plots/images/,
    params.yaml (the config), metrics.json (the latest values) and dvc.yaml declaring the plots.

    Nothing leaves the machine: no DVC experiment is saved and nothing is sent to DVC Studio
    unless you configured a Studio token yourself. Non-finite values are skipped, as the jsonl
    writer writes them as null.

    Args:
        folder: DVCLive's directory inside the run directory.
        images: also save validation images (plots/images/<tag>/<step>.png).
    """

    requires = ("dvclive", "dvclive")

    def __init__(self, run_dir: str | Path, folder: str = "dvclive", images: bool = True) -> None:
        super().__init__(run_dir)
        os.environ.setdefault("DVC_NO_ANALYTICS", "1")
        dvclive = self.load_requirement()
        self.dir = self.run_dir / folder
        self.images = images
        self._live = dvclive.Live(
            dir=str(self.dir), resume=True, save_dvc_exp=False, dvcyaml=str(self.dir / "dvc.yaml"), report=None
        )

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        self._live.step = step
        for tag, value in scalar_row(scalars).items():
            if value is not None:
                self._live.log_metric(tag, value)

    def write_scalar(self, tag: str, value: float, step: int) -> None:
        self.write_scalars({tag: value}, step)

    def write_image(self, tag: str, image: np.ndarray, step: int) -> None:
        if self.images:
            self._live.log_image(f"{tag}/{step:06d}.png", to_uint8(image))

    def write_config(self, config: Dict[str, Any], text: str) -> None:
        self._live.log_params(config)

    def flush(self) -> None:
        self._live.make_summary()

    def close(self) -> None:
        self._live.end()
