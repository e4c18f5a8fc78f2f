"""Which run a folder and a checkpoint belong to.

A run directory holds ``.splattrain-run`` with the run's id (a random hex string), written once
the run's checks passed; every resumable checkpoint stores the same id under ``run_id``. A
folder is a splattrain run when it holds that file with a run id in it (or, for runs made before
it existed, a checkpoint in ``ckpt/`` that opens as a splattrain checkpoint): content only
splattrain writes, never a file's name alone (a user's ``config.yaml`` and ``log.txt`` make no
run). A fresh fit goes only into an empty folder or a run; a resume refuses a checkpoint of
another run.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any, Mapping, Optional

from ..checkpoints.files import has_checkpoint_header
from ..errors import UserError
from ..io.atomic import atomic_write_text
from .run_lock import LOCK_NAME, STALE_TEMPORARY, RunDirectoryError

MARKER_NAME = ".splattrain-run"
_ID = re.compile(r"^[0-9a-f]{32}$")


def new_run_id() -> str:
    return uuid.uuid4().hex


def read_run_id(run_dir: Path) -> Optional[str]:
    """The id in ``run_dir``'s marker (None without one); RunDirectoryError for a marker that is
    not splattrain's (a link, unreadable, not an id)."""
    marker = Path(run_dir) / MARKER_NAME
    if not marker.exists() and not marker.is_symlink():
        return None
    try:
        if marker.is_symlink() or not marker.is_file() or marker.stat().st_size > 4096:
            raise ValueError
        run_id = json.loads(marker.read_text(encoding="utf-8"))["run_id"]
        if not isinstance(run_id, str) or not _ID.match(run_id):
            raise ValueError
    except (ValueError, KeyError, TypeError, OSError, UnicodeDecodeError):
        raise RunDirectoryError(f"'{marker}' is not a splattrain run marker; remove it or choose another "
                                "output_dir") from None
    return run_id


def write_run_id(run_dir: Path, run_id: str) -> None:
    """Record ``run_id`` in ``run_dir`` (atomically; a link there is replaced, not followed)."""
    atomic_write_text(Path(run_dir) / MARKER_NAME, json.dumps({"run_id": run_id}) + "\n")


def is_splattrain_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a splattrain run: its marker holds a run id, or (a run from before
    markers) ``ckpt/`` holds a file with splattrain's checkpoint header."""
    run_dir = Path(run_dir)
    try:
        if read_run_id(run_dir) is not None:
            return True
    except RunDirectoryError:
        return False
    ckpt = run_dir / "ckpt"
    return ckpt.is_dir() and not ckpt.is_symlink() and any(has_checkpoint_header(path) for path in ckpt.glob("*.pt"))


def foreign_entries(run_dir: Path) -> list:
    """What a folder that is not a splattrain run holds (its lock file aside); empty for a run."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or is_splattrain_run(run_dir):
        return []
    return sorted(entry.name for entry in run_dir.iterdir() if entry.name != LOCK_NAME)


def foreign_checkpoint_entries(folder: Path) -> list:
    """What a checkpoint folder holds (its lock file and splattrain's temporaries aside) when none of
    it is a splattrain checkpoint; empty for a folder holding one, an empty folder or none at all."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    entries = sorted(entry.name for entry in folder.iterdir()
                     if entry.name != LOCK_NAME and not STALE_TEMPORARY.match(entry.name))
    checkpoints = (path for path in folder.glob("*.pt") if path.is_file() and not path.is_symlink())
    if not entries or any(has_checkpoint_header(path) for path in checkpoints):
        return []
    return entries


def check_checkpoint_run(checkpoint: Mapping[str, Any], path: Path, run_id: Optional[str]) -> None:
    """Refuse a checkpoint made by another run than ``run_id`` (checkpoints or run directories
    from before run ids were stored pass)."""
    saved = checkpoint.get("run_id")
    if saved is None or run_id is None or saved == run_id:
        return
    raise CheckpointRunError(
        f"'{path}' belongs to another run (run id {str(saved)[:12]}, this run directory's is {run_id[:12]}); "
        "two runs may share a checkpoint folder only one at a time: resume from a checkpoint of this run"
    )


class CheckpointRunError(UserError):
    """A checkpoint of one run was offered to resume another."""
