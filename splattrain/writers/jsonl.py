"""One JSON object per logged step in ``<run_dir>/metrics.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, TextIO

from ..files import open_append
from ..registry import WRITERS
from .rows import RowFileWriter, scalar_row


@WRITERS.register("jsonl", aliases=("JsonlWriter",))
class JsonlWriter(RowFileWriter):
    """Scalars as JSON lines {"step": N, tag: value, ...}, one line per logging call (nan, inf: null);
    each validation's per-view scores as one line {"step": N, "views": [{"view": name, ...}, ...]}
    in ``views_filename``."""

    def __init__(self, run_dir: str | Path, filename: str = "metrics.jsonl", views_filename: str = "val_views.jsonl") -> None:
        super().__init__(run_dir, filename)
        self.views_path = self.run_dir / views_filename
        self._views: Optional[TextIO] = None

    def write_row(self, step: int, row: Dict[str, Optional[float]]) -> None:
        self._file.write(json.dumps({"step": step, **row}) + "\n")

    def write_views(self, views: List[Dict[str, Any]], step: int) -> None:
        rows = [{"view": str(v.get("view")), **scalar_row({k: x for k, x in v.items() if isinstance(x, (int, float))
                                                            and not isinstance(x, bool)})} for v in views]
        if self._views is None:
            self._views = open_append(self.views_path)
        self._views.write(json.dumps({"step": step, "views": rows}) + "\n")
        self._views.flush()

    def close(self) -> None:
        super().close()
        if self._views is not None:
            self._views.close()
