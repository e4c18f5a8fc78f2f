"""Scalars as rows of ``<run_dir>/scalars.csv``."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Dict, Optional

from ..registry import WRITERS
from .rows import RowFileWriter


@WRITERS.register("csv", aliases=("CsvWriter",))
class CsvWriter(RowFileWriter):
    """Scalars as 'step,tag,value' rows in scalars.csv (long format, one row per scalar; nan and
    inf leave the value empty, as the JSONL writer writes null).

    Load with ``pandas.read_csv(path).pivot_table(index="step", columns="tag", values="value")``.
    """

    newline = ""

    def __init__(self, run_dir: str | Path, filename: str = "scalars.csv") -> None:
        super().__init__(run_dir, filename)

    def write_header(self) -> None:
        csv.writer(self._file).writerow(["step", "tag", "value"])

    def write_row(self, step: int, row: Dict[str, Optional[float]]) -> None:
        csv.writer(self._file).writerows([step, tag, "" if value is None else value] for tag, value in row.items())

