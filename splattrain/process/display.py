"""Per-stage progress on the project's console: a live bar on a terminal, one line per stage otherwise."""

from __future__ import annotations

import time
from typing import Any, Optional

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..console import Console


class Stage:
    """One stage's progress (``with Stage(console, "extract", 77, "images") as stage: stage.update(n)``).

    ``seconds`` holds the stage's wall time once it ends; the closing line (terminal and log)
    says what was done and how long it took.
    """

    def __init__(self, console: Console, name: str, total: int, unit: str) -> None:
        self.console = console
        self.name = name
        self.total = max(1, total)
        self.unit = unit
        self.done = 0
        self.note = ""
        self.seconds = 0.0
        self._t0 = 0.0
        self._bar: Optional[Progress] = None
        self._task: Any = None

    def __enter__(self) -> "Stage":
        self._t0 = time.perf_counter()
        if self.console.is_tty and not self.console.quiet:
            self._bar = Progress(TextColumn(f"[bold]{self.name:<9}[/bold]"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn(self.unit), TimeElapsedColumn(), TimeRemainingColumn(),
                                 console=self.console.terminal, transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self.name, total=self.total)
        return self

    def set_total(self, total: int) -> None:
        """Change the number of units (a video's frame count is known once decoding starts)."""
        self.total = max(1, total)
        if self._bar is not None:
            self._bar.update(self._task, total=self.total)

    def update(self, done: int) -> None:
        """``done`` of ``total`` units finished (clipped to the total)."""
        self.done = min(max(done, self.done), self.total)
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self._t0
        if self._bar is not None:
            self._bar.stop()
        if exc_type is None:
            note = f"  ({escape(self.note)})" if self.note else ""
            self.console.print(f"[bold]{self.name:<9}[/bold] {self.done}/{self.total} {self.unit} "
                               f"in {self.seconds:.1f} s{note}")
