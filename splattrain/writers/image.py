"""PNG files under ``<run_dir>/images``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..io.atomic import atomic_path
from ..registry import WRITERS
from .base import Writer
from .png import png_bytes


@WRITERS.register("image", aliases=("ImageWriter",))
class ImageWriter(Writer):
    """Images (the validation grids) as PNGs: tag 'val/r_3' at step 500 -> images/val/step_000500/r_3.png."""

    def __init__(self, run_dir: str | Path, subdir: str = "images") -> None:
        super().__init__(run_dir)
        self.root = self.run_dir / subdir

    def write_image(self, tag: str, image: np.ndarray, step: int) -> None:
        group, _, name = tag.rpartition("/")
        path = self.root / group / f"step_{step:06d}" / f"{name}.png"
        data = png_bytes(image)
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)
