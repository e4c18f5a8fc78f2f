"""Scalars as rows of ``<run_dir>/scalars.csv``."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Mapping

from ..files import open_append
from ..registry import WRITERS
from .base import Writer
from .rows import scalar_row


@WRITERS.register("csv", aliases=("CsvWriter",))
class CsvWriter(Writer):
    """Scalars as 'step,tag,value' rows in scalars.csv (long format, one row per scalar; nan and
    inf leave the value empty, as the JSONL writer writes null).

    Load with ``pandas.read_csv(path).pivot_table(index="step", columns="tag", values="value")``.
    """

    def __init__(self, run_dir: str | Path, filename: str = "scalars.csv") -> None:
        super().__init__(run_dir)
        self.path = self.run_dir / filename
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._file = open_append(self.path, newline="")
        self._csv = csv.writer(self._file)
        if new:
            self._csv.writerow(["step", "tag", "value"])

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        self._csv.writerows([step, tag, "" if value is None else value] for tag, value in scalar_row(scalars).items())
        self._file.flush()

    def write_scalar(self, tag: str, value: float, step: int) -> None:
        self.write_scalars({tag: value}, step)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
