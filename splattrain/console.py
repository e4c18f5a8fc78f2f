"""Terminal and log-file output: a rich Console mirrored to log.txt, and a progress logger."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Set

from rich.console import Console as RichConsole
from rich.markup import escape
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # pragma: no cover - rich.progress is imported where a live bar is drawn (a terminal)
    from rich.progress import Progress

from .files import open_append


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
        self._held: Optional[List[Any]] = None
        self._log_path: Optional[Path] = None

    @property
    def is_tty(self) -> bool:
        """True when the terminal is interactive (live progress bars are drawn)."""
        return self.terminal.is_terminal

    def open_log(self, path: Path) -> None:
        """Start mirroring output to ``path`` (appending; a symlink there is refused, not followed),
        beginning with the lines held since :meth:`hold_log`."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open_append(path)
        self._log_path = path
        self._log = RichConsole(file=self._log_file, no_color=True, width=120, highlight=False, soft_wrap=True)
        held, self._held = self._held or [], None
        for objects in held:
            self.log(*objects)

    def hold_log(self) -> None:
        """Keep what is logged from now until :meth:`open_log` (which writes it first)."""
        if self._held is None and self._log is None:
            self._held = []

    def close(self) -> None:
        """Stop writing to log.txt."""
        log_file, self._log_file, self._log = self._log_file, None, None
        if log_file is not None:
            try:
                log_file.close()
            except OSError as err:  # what it still held could not be written (a full disk): name the file
                if err.filename is not None:
                    raise
                raise type(err)(err.errno, err.strerror or str(err), str(self._log_path)) from None

    def print(self, *objects: Any, terminal: bool = True) -> None:
        """Show rich renderables (text, tables) and log them."""
        if terminal and not self.quiet:
            self.terminal.print(*objects)
        self.log(*objects)

    def log(self, *objects: Any) -> None:
        """Write to log.txt only."""
        if self._log is not None:
            try:
                self._log.print(*objects)
                self._log_file.flush()  # type: ignore[union-attr]
            except OSError as err:  # a full disk: the error names log.txt
                if err.filename is not None:
                    raise
                raise type(err)(err.errno, err.strerror or str(err), str(self._log_path)) from None
        elif self._held is not None:
            self._held.append(objects)

    def info(self, message: str, markup: bool = False) -> None:
        """A line, printed as given; with ``markup`` its rich markup (``[bold]...[/bold]``) is applied."""
        self.print(message if markup else Text(message))

    def debug(self, message: str, markup: bool = False) -> None:
        """A line shown only with ``--verbose`` (always logged); ``markup`` as in :meth:`info`."""
        self.print(message if markup else Text(message), terminal=self.verbose)

    def warning(self, message: str, once: Optional[str] = None) -> None:
        """A warning, shown even when quiet; with ``once`` set, only the first with that key.

        ``message`` is plain text (brackets in it are not rich markup).
        """
        if once is not None:
            if once in self._warned:
                return
            self._warned.add(once)
        self.terminal.print(f"[yellow]warning:[/yellow] {escape(message)}")
        self.log(f"warning: {escape(message)}")

    @contextlib.contextmanager
    def transfer(self, description: str, total: Optional[int]) -> Iterator[Callable[[int], None]]:
        """Show a download of ``total`` bytes (None: unknown) while the block runs; yields a callable
        taking the bytes received since its last call. An interactive terminal shows a bar with
        size, speed and time left; otherwise (and in log.txt) one line before and one after."""
        size = "" if not total else f" ({total / 2**20:,.1f} MiB)" if total >= 2**20 else f" ({total / 2**10:,.1f} KiB)"
        self.info(f"downloading {description}{size}")
        if not self.is_tty or self.quiet:
            yield lambda received: None
        else:
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                       TransferSpeedColumn)

            columns = (TextColumn("  "), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
            with Progress(*columns, console=self.terminal, transient=True) as progress:
                task = progress.add_task("download", total=total)
                yield lambda received: progress.advance(task, received)
        self.info(f"downloaded {description}")

    def table(self, title: str, columns: List[str], rows: List[List[str]], terminal: bool = True) -> None:
        """A simple table (on the terminal only when ``terminal``; always logged)."""
        table = Table(title=title, title_justify="left")
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*row)
        self.print(table, terminal=terminal)


#: Metric name -> (column label, format, True when higher is better).
METRICS = {"psnr": ("PSNR", ".2f", True), "ssim": ("SSIM", ".4f", True), "lpips": ("LPIPS", ".4f", False)}


def validation_table(
    step: int,
    per_view: List[Mapping[str, Any]],
    mean: Mapping[str, Any],
    previous: Optional[Mapping[str, Any]] = None,
    max_views: int = 10,
) -> Table:
    """The validation report: PSNR / SSIM / LPIPS per view (worst PSNR first, at most
    ``max_views`` rows), their mean, and its change since ``previous`` (green: better)."""
    names = [name for name in METRICS if mean.get(name) is not None]
    shown = sorted(per_view, key=lambda view: view["psnr"])[: max(0, max_views)]
    detail = f"worst {len(shown)} of {len(per_view)} views" if len(shown) < len(per_view) else "worst view first"
    title = f"validation at step {step} ({detail})"
    table = Table(title=title, title_justify="left", min_width=len(title))
    table.add_column("view")
    for name in names:
        table.add_column(METRICS[name][0], justify="right")
    for view in shown:
        table.add_row(escape(str(view["view"])), *(_metric(view.get(name), name) for name in names))
    if shown:
        table.add_section()
    table.add_row("[bold]mean[/bold]", *(f"[bold]{_metric(mean[name], name)}[/bold]" for name in names))
    if previous:
        table.add_row("change", *(_change(mean[name], previous.get(name), name) for name in names))
    return table


def _metric(value: Optional[float], name: str) -> str:
    return "-" if value is None else format(value, METRICS[name][1])


def _change(value: float, before: Optional[float], name: str) -> str:
    if before is None:
        return "-"
    delta = value - before
    text = format(delta, "+" + METRICS[name][1])
    if delta == 0:
        return text
    better = (delta > 0) == METRICS[name][2]
    return f"[green]{text}[/green]" if better else f"[red]{text}[/red]"


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
        self._progress: Optional["Progress"] = None
        self._task = None
        self._t0 = time.perf_counter()
        self._paused_at: Optional[float] = None

    def __enter__(self) -> "ProgressLogger":
        self._t0 = time.perf_counter()
        if self.console.is_tty and not self.console.quiet:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("[bold]step[/bold] {task.completed}/{task.total}"),
                BarColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                TextColumn("{task.fields[eta]}"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[status]}"),
                console=self.console.terminal,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("train", total=self.total, completed=self.start_step, rate="", status="",
                                               eta="eta")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def set_paused(self, paused: bool, step: int) -> None:
        """Show that training is paused at ``step``; paused time counts in neither rate nor ETA."""
        now = time.perf_counter()
        if paused and self._paused_at is None:
            self._paused_at = now
            if self._progress is not None:
                self._progress.update(self._task, rate="paused", eta="eta (paused)",
                                       status="paused (resume in the viewer)")
        elif not paused and self._paused_at is not None:
            self._t0 += now - self._paused_at
            self._paused_at = None
            if self._progress is not None:
                self._progress.update(self._task, rate=f"{self.rate(step):.1f} it/s", eta="eta", status="")

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
                self.console.log(Text(self.line(step, fields)))
        elif due:
            self.console.info(self.line(step, fields))

    def refresh(self, step: int, fields: Dict[str, Any]) -> None:
        """Show new ``fields`` on the bar at ``step`` (nothing printed or logged: a new validation
        result after the step's line)."""
        if self._progress is not None:
            self._progress.update(self._task, completed=step, status=format_fields(fields))

    def line(self, step: int, fields: Mapping[str, Any]) -> str:
        """The plain progress line for ``step``."""
        rate = self.rate(step)
        remaining = (self.total - step) / rate if rate > 0 else float("nan")
        eta = time.strftime("%H:%M:%S", time.gmtime(remaining)) if remaining == remaining else "?"
        return f"step {step}/{self.total}  {rate:.1f} it/s  eta {eta}  {format_fields(fields)}"
