"""Terminal and log-file output: a rich Console mirrored to log.txt, and a progress logger."""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO, Any, Dict, Mapping, Optional, Set

from rich.console import Console as RichConsole
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table


class Console:
    """Everything the trainer shows: to the terminal (rich) and, once opened, to log.txt.

    ``quiet`` shows only warnings and errors on the terminal; the log file always gets
    everything.
    """

    def __init__(self, quiet: bool = False, verbose: bool = False, terminal: Optional[RichConsole] = None) -> None:
        self.quiet = quiet
        self.verbose = verbose
        self.terminal = terminal or RichConsole(highlight=False, soft_wrap=True)
        self._log: Optional[RichConsole] = None
        self._log_file: Optional[IO[str]] = None
        self._warned: Set[str] = set()

    @property
    def is_tty(self) -> bool:
        """True when the terminal is interactive (live progress bars are drawn)."""
        return self.terminal.is_terminal

    def open_log(self, path: Path) -> None:
        """Start mirroring output to ``path`` (appending)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(path, "a", encoding="utf-8")
        self._log = RichConsole(file=self._log_file, no_color=True, width=120, highlight=False, soft_wrap=True)

    def close(self) -> None:
        """Stop writing to log.txt."""
        if self._log_file is not None:
            self._log_file.close()
        self._log = None
        self._log_file = None

    def print(self, *objects: Any, terminal: bool = True) -> None:
        """Show rich renderables (text, tables) and log them."""
        if terminal and not self.quiet:
            self.terminal.print(*objects)
        self.log(*objects)

    def log(self, *objects: Any) -> None:
        """Write to log.txt only."""
        if self._log is not None:
            self._log.print(*objects)
            self._log_file.flush()  # type: ignore[union-attr]

    def info(self, message: str) -> None:
        """A plain line."""
        self.print(message)

    def debug(self, message: str) -> None:
        """A line shown only with ``--verbose`` (always logged)."""
        self.print(message, terminal=self.verbose)

    def warning(self, message: str, once: Optional[str] = None) -> None:
        """A warning; with ``once`` set, only the first warning with that key is shown."""
        if once is not None:
            if once in self._warned:
                return
            self._warned.add(once)
        self.terminal.print(f"[yellow]warning:[/yellow] {message}")
        self.log(f"warning: {message}")

    def table(self, title: str, columns: list[str], rows: list[list[str]]) -> None:
        """A simple table."""
        table = Table(title=title, title_justify="left")
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*row)
        self.print(table)


def format_fields(fields: Mapping[str, Any]) -> str:
    """'key value' pairs for progress lines, floats in compact form."""
    parts = []
    for key, value in fields.items():
        if isinstance(value, float):
            text = f"{value:.3e}" if (value != 0 and abs(value) < 1e-2) else f"{value:.4f}"
        else:
            text = str(value)
        parts.append(f"{key} {text}")
    return "  ".join(parts)


class ProgressLogger:
    """Step progress: a live bar on a TTY, plain lines every ``interval`` steps otherwise.

    Every ``interval`` steps the same line also goes to log.txt.
    """

    def __init__(self, console: Console, total: int, start: int = 0, interval: int = 50) -> None:
        self.console = console
        self.total = total
        self.start_step = start
        self.interval = max(1, interval)
        self._progress: Optional[Progress] = None
        self._task = None
        self._t0 = time.perf_counter()

    def __enter__(self) -> "ProgressLogger":
        self._t0 = time.perf_counter()
        if self.console.is_tty and not self.console.quiet:
            self._progress = Progress(
                TextColumn("[bold]step[/bold] {task.completed}/{task.total}"),
                BarColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[status]}"),
                console=self.console.terminal,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("train", total=self.total, completed=self.start_step, rate="", status="")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def rate(self, step: int) -> float:
        """Steps per second since the logger started."""
        elapsed = time.perf_counter() - self._t0
        return (step - self.start_step) / elapsed if elapsed > 0 else 0.0

    def update(self, step: int, fields: Dict[str, Any]) -> None:
        """Report ``step``; ``fields`` are shown (bar) or printed (every interval)."""
        due = step % self.interval == 0 or step == self.total
        if self._progress is not None:
            self._progress.update(
                self._task, completed=step, rate=f"{self.rate(step):.1f} it/s", status=format_fields(fields)
            )
            if due:
                self.console.log(self.line(step, fields))
        elif due:
            self.console.print(self.line(step, fields))

    def line(self, step: int, fields: Mapping[str, Any]) -> str:
        """The plain progress line for ``step``."""
        rate = self.rate(step)
        remaining = (self.total - step) / rate if rate > 0 else float("nan")
        eta = time.strftime("%H:%M:%S", time.gmtime(remaining)) if remaining == remaining else "?"
        return f"step {step}/{self.total}  {rate:.1f} it/s  eta {eta}  {format_fields(fields)}"
