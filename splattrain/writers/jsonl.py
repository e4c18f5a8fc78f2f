"""One JSON object per logged step in ``<run_dir>/metrics.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from ..files import open_append
from ..registry import WRITERS
from .base import Writer
from .rows import scalar_row


@WRITERS.register("jsonl", aliases=("JsonlWriter",))
class JsonlWriter(Writer):
    """Scalars as JSON lines {"step": N, tag: value, ...}, one line per logging call (nan, inf: null)."""

    def __init__(self, run_dir: str | Path, filename: str = "metrics.jsonl") -> None:
        super().__init__(run_dir)
        self.path = self.run_dir / filename
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open_append(self.path)

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        row = {"step": step, **scalar_row(scalars)}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def write_scalar(self, tag: str, value: float, step: int) -> None:
        self.write_scalars({tag: value}, step)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
