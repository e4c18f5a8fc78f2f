"""One JSON object per logged step in ``<run_dir>/metrics.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Optional

from ..registry import WRITERS
from .rows import RowFileWriter


@WRITERS.register("jsonl", aliases=("JsonlWriter",))
class JsonlWriter(RowFileWriter):
    """Scalars as JSON lines {"step": N, tag: value, ...}, one line per logging call (nan, inf: null)."""

    def __init__(self, run_dir: str | Path, filename: str = "metrics.jsonl") -> None:
        super().__init__(run_dir, filename)

    def write_row(self, step: int, row: Dict[str, Optional[float]]) -> None:
        self._file.write(json.dumps({"step": step, **row}) + "\n")
