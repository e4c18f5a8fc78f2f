"""An example custom writer: every scalar into a SQLite database your own tools can query.

Load it from a config with ``imports: [examples/my_writer.py]`` and add
``{type: SqliteWriter}`` to ``writers``; docs/writers.md walks through it.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Any, Dict, Mapping

from splattrain import WRITERS, Writer


@WRITERS.register()
class SqliteWriter(Writer):
    """Scalars as (run, step, tag, value) rows of a SQLite table, and each run's config."""

    def __init__(self, run_dir: str | Path, database: str = "metrics.sqlite", run: str = "") -> None:
        super().__init__(run_dir)
        self.run = run or self.run_dir.name
        self.path = self.run_dir / Path(database).expanduser()  # an absolute path: one database for all runs
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path)
        self._db.execute("CREATE TABLE IF NOT EXISTS scalars (run TEXT, step INTEGER, tag TEXT, value REAL)")
        self._db.execute("CREATE TABLE IF NOT EXISTS configs (run TEXT PRIMARY KEY, yaml TEXT)")

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        rows = [(self.run, step, tag, float(value)) for tag, value in scalars.items() if math.isfinite(value)]
        self._db.executemany("INSERT INTO scalars VALUES (?, ?, ?, ?)", rows)

    def write_config(self, config: Dict[str, Any], text: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO configs VALUES (?, ?)", (self.run, text))
        self._db.commit()

    def flush(self) -> None:
        self._db.commit()

    def close(self) -> None:
        self._db.commit()
        self._db.close()
