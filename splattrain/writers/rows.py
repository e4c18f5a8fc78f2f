"""What the file writers share: the one row formatter, so every file agrees on every value, and
the appending of rows to one file in the run directory."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Dict, Mapping, Optional

from ..files import open_append
from .base import Writer


def scalar_row(scalars: Mapping[str, float]) -> Dict[str, Optional[float]]:
    """``{tag: float}`` with non-finite values (nan, inf) as None: JSON null, an empty CSV cell."""
    row: Dict[str, Optional[float]] = {}
    for tag, value in scalars.items():
        value = float(value)
        row[tag] = value if math.isfinite(value) else None
    return row


class RowFileWriter(Writer, ABC):
    """Appends each logging call's scalars (as :func:`scalar_row`) to ``<run_dir>/<filename>``,
    flushed at once; a subclass writes the row (:meth:`write_row`) and, in a new file, a header."""

    #: ``newline`` of the opened file (``""`` for the csv module).
    newline: Optional[str] = None

    def __init__(self, run_dir: str | Path, filename: str) -> None:
        super().__init__(run_dir)
        self.path = self.run_dir / filename
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._file = open_append(self.path, newline=self.newline)
        if new:
            self.write_header()

    def write_header(self) -> None:
        """Start a new, empty file (default: nothing)."""

    @abstractmethod
    def write_row(self, step: int, row: Dict[str, Optional[float]]) -> None:
        """Append ``row`` (tag: value or None) logged at ``step``."""

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        self.write_row(step, scalar_row(scalars))
        self._file.flush()

    def write_scalar(self, tag: str, value: float, step: int) -> None:
        self.write_scalars({tag: value}, step)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
