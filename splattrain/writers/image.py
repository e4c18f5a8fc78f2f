"""PNG files under ``<run_dir>/images``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..io.png import save_png
from ..registry import WRITERS
from .base import Writer


@WRITERS.register("image", aliases=("ImageWriter",))
class ImageWriter(Writer):
    """Images (the validation grids) as PNGs: tag 'val/r_3' at step 500 -> images/val/step_000500/r_3.png."""

    def __init__(self, run_dir: str | Path, subdir: str = "images") -> None:
        super().__init__(run_dir)
        self.root = self.run_dir / subdir

    def write_image(self, tag: str, image: np.ndarray, step: int) -> None:
        group, _, name = tag.rpartition("/")
        save_png(self.root / group / f"step_{step:06d}" / f"{name}.png", image)
