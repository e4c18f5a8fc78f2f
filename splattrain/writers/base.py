"""Writer base class and the group that fans out to several writers safely."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import numpy as np


class Writer:
    """Sends scalars, images and the config somewhere (files, TensorBoard, a tracker).

    Subclasses get the run directory as ``run_dir`` and override what they support.
    Images are float32 or uint8 arrays of shape [H, W, 3].
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)

    def write_scalar(self, tag: str, value: float, step: int) -> None:
        """One scalar at ``step``."""

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        """Several scalars logged together at ``step`` (default: one write_scalar each)."""
        for tag, value in scalars.items():
            self.write_scalar(tag, value, step)

    def write_image(self, tag: str, image: np.ndarray, step: int) -> None:
        """One [H, W, 3] image at ``step``."""

    def write_config(self, config: Dict[str, Any], text: str) -> None:
        """The resolved config, as a dict and as YAML text."""

    def flush(self) -> None:
        """Push buffered data out."""

    def close(self) -> None:
        """Release files and connections."""


class WriterGroup:
    """Fans calls out to writers; a writer that raises is reported once and disabled."""

    def __init__(self, writers: List[Writer], warn: Optional[Any] = None) -> None:
        self.writers = list(writers)
        self._warn = warn

    def _call(self, method: str, *args: Any) -> None:
        for writer in list(self.writers):
            try:
                getattr(writer, method)(*args)
            except Exception as err:  # a writer must never stop training
                self.writers.remove(writer)
                if self._warn is not None:
                    self._warn(
                        f"writer {type(writer).__name__} failed in {method} "
                        f"({type(err).__name__}: {err}); it is disabled for the rest of the run"
                    )

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        self._call("write_scalars", scalars, step)

    def write_image(self, tag: str, image: np.ndarray, step: int) -> None:
        self._call("write_image", tag, image, step)

    def write_config(self, config: Dict[str, Any], text: str) -> None:
        self._call("write_config", config, text)

    def flush(self) -> None:
        self._call("flush")

    def close(self) -> None:
        self._call("close")
