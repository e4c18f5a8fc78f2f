"""The run folder: where a run's files go, who owns it, and which run it holds.

A :class:`RunFolder` is built once from the config (``output_dir``, ``checkpoint_dir``). It
locks the run folder (and the checkpoint folder when that lies elsewhere), checks what is in
them before anything changes, knows the run's id, names every checkpoint file, and opens the
folder: temporaries a killed process left are removed, the run marker, ``config.yaml`` and
``log.txt`` are written. Only rank 0 touches files; other ranks hold a folder that only names paths.
:func:`command_output` is where ``eval``, ``render`` and ``export`` write, by the same rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..checkpoints.files import save_checkpoint_file, step_checkpoints
from ..errors import ConfigError
from ..files import OutputFolder, linked_file_error, refuse_links_under
from ..io.gaussians_file import FORMATS, write_gaussians_file
from ..io.atomic import atomic_link, atomic_write_text
from .run_identity import (MARKER_NAME, check_checkpoint_run, foreign_checkpoint_entries, foreign_entries,
                           is_splattrain_run, new_run_id, read_run_id, write_run_id)
from .run_lock import RunDirectoryError, RunLock, RunLocks, move_run_aside, remove_stale_temporaries

#: Files a run appends to: a symbolic link in their place is refused before anything changes.
APPENDED_FILES = ("log.txt", "metrics.jsonl", "metrics.csv")

Resumed = Tuple[Path, Dict[str, Any]]
Message = Callable[[str], None]


class RunFolder:
    """A run's folder and its checkpoint folder, owned by one process for the run's life."""

    def __init__(self, run_dir: Path, checkpoint_dir: Optional[Path] = None, is_main: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else self.run_dir / "ckpt"
        self.is_main = is_main
        self.run_id: Optional[str] = None  #: set by :meth:`prepare` (rank 0)
        self.notes: List[str] = []  #: what the checks found, shown once log.txt is open
        self._locks: Optional[RunLocks] = None

    @classmethod
    def from_config(cls, cfg: Any, is_main: bool = True) -> "RunFolder":
        """The folders of ``cfg``: ``output_dir``, and ``checkpoint_dir`` (default ``<output_dir>/ckpt``)."""
        checkpoint_dir = cfg.get("checkpoint_dir")
        return cls(Path(cfg.output_dir), Path(checkpoint_dir) if checkpoint_dir else None, is_main)

    @property
    def separate_checkpoints(self) -> bool:
        """Whether the checkpoint folder lies outside the run folder."""
        return not _inside(self.checkpoint_dir, self.run_dir)

    # -- ownership --------------------------------------------------------------------
    def lock(self) -> None:
        """Lock the run folder, and the checkpoint folder when it lies elsewhere (RunDirectoryError
        naming the process holding either). Nothing is locked on ranks other than 0."""
        if not self.is_main:
            return
        self.check_places()
        locks = RunLocks([RunLock(self.run_dir).acquire(self.notes.append)])
        if self.separate_checkpoints:
            try:
                locks.locks.append(RunLock(self.checkpoint_dir, "checkpoint folder (checkpoint_dir)").acquire(self.notes.append))
            except BaseException:
                locks.release()
                raise
        self._locks = locks

    def check_places(self) -> None:
        """Refuse, before anything is written, an ``output_dir`` or ``checkpoint_dir`` that cannot be a
        run's own folder: the root, the current folder or one above it, a file; and a separate
        ``checkpoint_dir`` that holds files but no splattrain checkpoint."""
        for key, folder in (("output_dir", self.run_dir), ("checkpoint_dir", self.checkpoint_dir)):
            _refuse_place(key, folder)
        foreign = foreign_checkpoint_entries(self.checkpoint_dir) if self.separate_checkpoints else []
        if foreign:
            shown = ", ".join(repr(name) for name in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
            raise RunDirectoryError(f"checkpoint_dir '{self.checkpoint_dir}' is not empty and holds no splattrain "
                                    f"checkpoint ({len(foreign)} entries: {shown}); choose another checkpoint_dir")

    def release(self) -> None:
        """Drop the locks (nothing when none are held)."""
        if self._locks is not None:
            self._locks.release()
            self._locks = None

    # -- before anything changes ------------------------------------------------------
    def prepare(self, resume: Optional[str | Path], overwrite: bool, warn: Message,
                read: Callable[[str | Path], Resumed]) -> Optional[Resumed]:
        """Refuse a folder holding files but no splattrain run, and links where run files go;
        read the checkpoint to resume with ``read`` (one of another run is refused), or refuse a
        fresh run into a folder holding checkpoints (``overwrite`` moves the old run, or a foreign
        folder's content, aside). Sets :attr:`run_id` on rank 0; changes nothing else but the move."""
        if not self.is_main:
            return read(resume) if resume is not None else None
        foreign = foreign_entries(self.run_dir)
        if resume is not None:
            self._refuse_foreign(foreign, "resume")
            self._refuse_links()
            self.run_id = read_run_id(self.run_dir)
            path, checkpoint = read(resume)
            check_checkpoint_run(checkpoint, path, self.run_id)
            self.run_id = self.run_id or checkpoint.get("run_id") or new_run_id()
            return path, checkpoint
        existing = sorted(self.checkpoint_dir.glob("*.pt")) if self.checkpoint_dir.is_dir() else []
        if existing and self.separate_checkpoints:
            raise RunDirectoryError(
                f"'{self.checkpoint_dir}' already holds checkpoints of a run ({len(existing)} files); "
                "pass --resume to continue it, or choose another output_dir or checkpoint_dir")
        if (existing or foreign) and overwrite:
            warn(f"--overwrite: moved what was in {self.run_dir} to {move_run_aside(self.run_dir)}")
        elif existing:
            raise RunDirectoryError(
                f"'{self.checkpoint_dir}' already holds checkpoints of a run ({len(existing)} files); "
                "pass --resume to continue it, --overwrite to move it aside, or choose another output_dir")
        else:
            self._refuse_foreign(foreign, "fit")
        self._refuse_links()
        self.run_id = new_run_id()
        return None

    def _refuse_foreign(self, foreign: List[str], what: str) -> None:
        """A folder that holds files but no splattrain run is never written into."""
        if not foreign:
            return
        shown = ", ".join(repr(name) for name in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        hint = "--overwrite moves its content aside; " if what == "fit" else ""
        raise RunDirectoryError(f"output_dir '{self.run_dir}' is not empty and holds no splattrain run "
                                f"({len(foreign)} entries: {shown}); {hint}choose another output_dir")

    def _refuse_links(self) -> None:
        """Files a run appends to must not be symbolic links, nor may any folder inside the run (or
        checkpoint) folder: files would be written through them, into the folders they point at."""
        for name in APPENDED_FILES:
            if (self.run_dir / name).is_symlink():
                raise linked_file_error(self.run_dir / name)
        for folder in (self.run_dir, self.checkpoint_dir):
            refuse_links_under(folder)

    # -- opening ------------------------------------------------------------------------
    def open(self, config_text: str) -> List[str]:
        """Once every check passed (rank 0): remove temporaries a killed process left, create the
        folder, write the run marker and ``config.yaml``; returns the notes to show in the log."""
        if not self.is_main:
            return []
        notes = self.notes + [f"removed {stale}, left by a process that stopped while writing it"
                              for stale in remove_stale_temporaries(self.run_dir, self.checkpoint_dir)]
        self.notes = []
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.run_id and read_run_id(self.run_dir) != self.run_id:
            write_run_id(self.run_dir, self.run_id)
        atomic_write_text(self.run_dir / "config.yaml", config_text)
        return notes

    # -- checkpoint and scene files -------------------------------------------------
    def checkpoint_path(self, step: int, name: Optional[str] = None) -> Path:
        """``ckpt/step_XXXXXX.pt``, or ``ckpt/<name>.pt`` (``best``, ``published``)."""
        return self.checkpoint_dir / (f"{name}.pt" if name else f"step_{step:06d}.pt")

    def rescue_path(self, step: int) -> Path:
        """Where the rescue checkpoint of ``step`` goes."""
        return self.checkpoint_dir / f"rescue_step_{step:06d}.pt"

    def write_checkpoint(self, checkpoint: Dict[str, Any], name: Optional[str] = None, keep_last: int = 0) -> Path:
        """Write ``checkpoint`` atomically as ``step_XXXXXX.pt`` (pointing ``last.pt`` at it and
        removing this run's step checkpoints beyond the newest ``keep_last`` when > 0), or as
        ``<name>.pt``; returns its path."""
        path = self.checkpoint_path(int(checkpoint["step"]), name)
        save_checkpoint_file(checkpoint, path)
        if name is None:
            atomic_link(path, self.checkpoint_dir / "last.pt")
            for old in step_checkpoints(self.checkpoint_dir)[keep_last:] if keep_last > 0 else []:
                old.unlink()
        return path

    def write_scene(self, name: str, params: Dict[str, Any], fmt: str, antialiased: bool) -> Path:
        """Write the Gaussians ``params`` to ``<run_dir>/<name>`` in ``fmt`` (ply, ply-compressed, spz, splat)."""
        if fmt not in FORMATS:
            raise ConfigError(f"scene format {fmt!r}: use {', '.join(FORMATS)}")
        path = self.run_dir / name
        write_gaussians_file(path, params, fmt, antialiased=antialiased)
        return path

    def last_good_checkpoint(self) -> str:
        """Where the run's newest step checkpoint is (checkpoints always hold Gaussians), as a phrase."""
        saved = step_checkpoints(self.checkpoint_dir)
        if not saved:
            return "no checkpoint was saved before it"
        return f"its last checkpoint with Gaussians is {saved[0]} (resume with --resume {saved[0]})"


#: A run's own folder for each key, as the refusal of another one suggests.
PLACES_SHOWN = {"output_dir": "outputs/<name>", "checkpoint_dir": "<output_dir>/ckpt"}


def _refuse_place(key: str, folder: Path) -> None:
    """A run folder (or checkpoint folder) is a folder of its own: never the root, the current folder
    or one above it (``--overwrite`` would move the folder one works in aside), nor a file."""
    resolved, here = folder.resolve(), Path.cwd().resolve()
    where = ("the root folder" if resolved == Path(resolved.anchor) else "the current folder" if resolved == here
             else "a folder above the current one" if here.is_relative_to(resolved) else None)
    if where is not None:
        raise RunDirectoryError(f"{key} '{folder}' is {where}; a run writes into a folder of its own: "
                                f"choose another {key} (a new folder, such as {PLACES_SHOWN[key]})")
    if folder.exists() and not folder.is_dir():
        raise RunDirectoryError(f"{key} '{folder}' is a file, not a folder; choose another {key}")


def command_output(run_dir: Path, out: Optional[str | Path], default: str | Path,
                   subfolders: Sequence[str] = ()) -> OutputFolder:
    """Where ``eval``, ``render`` and ``export`` write: the folder ``out`` when given (the
    user's; the levels a command makes below it, ``subfolders`` among them, and the files it writes
    are checked), else ``default`` inside ``run_dir``, which must hold a splattrain run
    (RunDirectoryError otherwise: pass --out); there every level, and a link anywhere in what the
    folder holds already, is refused before anything is written."""
    if out is not None:
        return OutputFolder(Path(out)).check(subfolders)
    if not is_splattrain_run(run_dir):
        raise RunDirectoryError(f"'{run_dir}' holds no splattrain run (no {MARKER_NAME} marker, no checkpoint in "
                                "ckpt/), and splattrain writes by default only into its own runs: pass --out")
    return OutputFolder(Path(run_dir), default).check(subfolders, whole=True)


def _inside(folder: Path, run_dir: Path) -> bool:
    return Path(folder).resolve().is_relative_to(Path(run_dir).resolve())
