"""What a run writes besides checkpoints: the run directory, writers, the header, results.json."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import torch
from omegaconf import OmegaConf
from rich.markup import escape

from .. import __version__
from ..config import config_to_yaml
from ..errors import ConfigError, UserError
from ..hooks.checkpoint_hook import CheckPointHook
from ..io.atomic import atomic_write_text
from ..registry import WRITERS
from ..writers import Writer, WriterGroup
from . import checkpointing
from .run_identity import check_checkpoint_run, foreign_entries, new_run_id, read_run_id, write_run_id
from .run_lock import RunDirectoryError, RunLock, RunLocks, move_run_aside, remove_stale_temporaries

#: Files a run appends to: a symbolic link in their place is refused before anything changes.
APPENDED_FILES = ("log.txt", "metrics.jsonl", "metrics.csv")

if TYPE_CHECKING:  # pragma: no cover
    from .trainer import DefaultTrainer


class SharedRunDir:
    """What ranks other than 0 hold instead of the lock: rank 0 owns the run directory."""

    def release(self) -> None:
        """Nothing to release."""


def lock_run_dir(trainer: "DefaultTrainer") -> RunLocks | SharedRunDir:
    """Lock the run directory for this process (RunDirectoryError naming the PID holding it), and
    the checkpoint folder when ``default_hooks.checkpoint.out_dir`` puts it elsewhere; sets
    ``trainer.checkpoint_dir``. On ranks other
    than 0 of a multi-process run nothing is locked (rank 0 holds the locks)."""
    for hook in trainer.hooks.hooks:
        if isinstance(hook, CheckPointHook) and hook.out_dir is not None:
            trainer.checkpoint_dir = Path(hook.out_dir)
    if not trainer.is_main:
        return SharedRunDir()
    notes: List[str] = []
    lock = RunLocks([RunLock(trainer.run_dir).acquire(notes.append)])
    if not _inside(trainer.checkpoint_dir, trainer.run_dir):
        try:
            lock.locks.append(RunLock(trainer.checkpoint_dir, "checkpoint folder (default_hooks.checkpoint.out_dir)")
                              .acquire(notes.append))
        except BaseException:
            lock.release()
            raise
    trainer.runtime_notes = notes  # shown once log.txt is open
    return lock


def check_run_dir(trainer: "DefaultTrainer", resume: Optional[str | Path], overwrite: bool) -> Optional[tuple]:
    """Before anything in the run directory changes: refuse a folder that holds files but no
    splattrain run, and run files that are symbolic links; read and check the checkpoint to
    resume (returned for ``load_checkpoint``; one of another run is refused), or refuse a fresh
    run into a directory holding checkpoints. ``overwrite`` moves an old run, or a foreign
    folder's content, aside. Sets ``trainer.run_id`` (on rank 0)."""
    if not trainer.is_main:
        return checkpointing.read_checkpoint(trainer, resume) if resume is not None else None
    foreign = foreign_entries(trainer.run_dir)
    if resume is not None:
        _refuse_foreign(trainer, foreign, "resume")
        _refuse_links(trainer.run_dir, trainer.checkpoint_dir)
        trainer.run_id = read_run_id(trainer.run_dir)
        path, checkpoint = checkpointing.read_checkpoint(trainer, resume)
        check_checkpoint_run(checkpoint, path, trainer.run_id)
        trainer.run_id = trainer.run_id or checkpoint.get("run_id") or new_run_id()
        return path, checkpoint
    existing = sorted(trainer.checkpoint_dir.glob("*.pt")) if trainer.checkpoint_dir.is_dir() else []
    if existing and not _inside(trainer.checkpoint_dir, trainer.run_dir):
        raise RunDirectoryError(
            f"'{trainer.checkpoint_dir}' already holds checkpoints of a run ({len(existing)} files); "
            "pass --resume to continue it, or choose another output_dir or default_hooks.checkpoint.out_dir"
        )
    if (existing or foreign) and overwrite:
        moved = move_run_aside(trainer.run_dir)
        trainer.console.warning(f"--overwrite: moved what was in {trainer.run_dir} to {moved}")
    elif existing:
        raise RunDirectoryError(
            f"'{trainer.checkpoint_dir}' already holds checkpoints of a run ({len(existing)} files); "
            "pass --resume to continue it, --overwrite to move it aside, or choose another output_dir"
        )
    else:
        _refuse_foreign(trainer, foreign, "fit")
    _refuse_links(trainer.run_dir, trainer.checkpoint_dir)
    trainer.run_id = new_run_id()
    return None


def _refuse_foreign(trainer: "DefaultTrainer", foreign: List[str], what: str) -> None:
    """A folder that holds files but no splattrain run is never written into."""
    if not foreign:
        return
    shown = ", ".join(repr(name) for name in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
    hint = "--overwrite moves its content aside; " if what == "fit" else ""
    raise RunDirectoryError(f"output_dir '{trainer.run_dir}' is not empty and holds no splattrain run "
                            f"({len(foreign)} entries: {shown}); {hint}choose another output_dir")


def _refuse_links(run_dir: Path, checkpoint_dir: Path) -> None:
    """Files a run appends to must not be symbolic links, nor may any folder inside the run (or
    checkpoint) folder: files would be written through them, into the folders they point at."""
    for name in APPENDED_FILES:
        if (run_dir / name).is_symlink():
            raise RunDirectoryError(f"'{run_dir / name}' is a symbolic link; splattrain writes its run files only "
                                    "as regular files, never through a link: remove it")
    for folder in (run_dir, checkpoint_dir):
        for parent, folders, files in os.walk(folder):  # links to folders are listed, not followed
            for name in folders + files:
                path = Path(parent) / name
                if path.is_symlink() and not path.is_file():  # a link to a folder, or to nothing
                    raise RunDirectoryError(f"'{path}' is a symbolic link to a folder (or to nothing); splattrain "
                                            "writes its run files only into real folders, never through a link: "
                                            "remove it")


def _inside(folder: Path, run_dir: Path) -> bool:
    return Path(folder).resolve().is_relative_to(Path(run_dir).resolve())


def open_run_dir(trainer: "DefaultTrainer") -> WriterGroup:
    """Once every check passed: delete temporaries a killed process left in the run and checkpoint
    folders, create the run directory, start log.txt, write config.yaml, and start the writers
    (on rank 0; other ranks get no writers)."""
    if not trainer.is_main:
        return WriterGroup([], warn=trainer.console.warning)
    notes = list(getattr(trainer, "runtime_notes", []))
    notes += [f"removed {stale}, left by a process that stopped while writing it"
              for stale in remove_stale_temporaries(trainer.run_dir, trainer.checkpoint_dir)]
    trainer.run_dir.mkdir(parents=True, exist_ok=True)
    if getattr(trainer, "run_id", None) and read_run_id(trainer.run_dir) != trainer.run_id:
        write_run_id(trainer.run_dir, trainer.run_id)
    trainer.console.open_log(trainer.run_dir / "log.txt")
    for note in notes:
        trainer.console.info(note)
    text = config_to_yaml(trainer.cfg)
    atomic_write_text(trainer.run_dir / "config.yaml", text)
    specs = [dict(spec) for spec in trainer.cfg.writers]
    writers = [w for w in (_build_writer(trainer, spec, f"writers[{i}]") for i, spec in enumerate(specs)) if w is not None]
    group = WriterGroup(writers, warn=trainer.console.warning)
    group.write_config(OmegaConf.to_container(trainer.cfg, resolve=True), text)
    return group


def _build_writer(trainer: "DefaultTrainer", spec: Dict[str, Any], where: str) -> Optional[Writer]:
    """The writer of the entry at key path ``where``. One that cannot start stops the run with a
    ConfigError naming it, unless the entry says ``optional: true``: then it is skipped with a warning."""
    optional = bool(spec.pop("optional", False))
    try:
        return WRITERS.build(spec, where=where, run_dir=trainer.run_dir)
    except Exception as err:
        detail = str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {err}"
        if not optional:
            raise ConfigError(f"{where}: writer {spec.get('type')!r} could not start ({detail}); "
                              "mark it optional: true to train without it") from None
        trainer.console.warning(f"{where}: optional writer {spec.get('type')!r} could not start ({detail}); "
                                "training goes on without it")
        return None


def _gaussian_count(trainer: "DefaultTrainer", resumed: Optional[tuple]) -> int:
    """The Gaussians the run trains from: the checkpoint's when resuming, else the initial model's."""
    if resumed is not None:
        means = resumed[1].get("gaussians", {}).get("means")
        if means is not None:
            return int(means.shape[0])
    return trainer.model.num_gaussians


def print_header(trainer: "DefaultTrainer", resumed: Optional[tuple] = None) -> None:
    """Scene, device, renderer, strategy, loss, Gaussians and steps; the hook table with --verbose.
    A resumed run (``resumed``: what ``read_checkpoint`` returned) shows the checkpoint's Gaussians."""
    console, data, cfg = trainer.console, trainer.data, trainer.cfg
    camera = data.train_cameras[0]
    device = str(trainer.device)
    if trainer.device.type == "cuda":
        device += f" ({torch.cuda.get_device_name(trainer.device)})"
    console.info(
        f"[bold]splattrain {__version__}[/bold]  scene [bold]{escape(str(cfg.name))}[/bold]  "
        f"{trainer.data_type} {escape(str(cfg.data.path))}: {len(data.train_frames)} train / "
        f"{len(data.test_frames)} test views, {camera.width}x{camera.height}", markup=True,
    )
    for note in data.scene.extra.get("notes", []):
        console.info(note)
    console.info(
        f"device {device}  renderer {type(trainer.renderer).__name__} ({trainer.renderer.rasterize_mode})  "
        f"gaussians {_gaussian_count(trainer, resumed):,}  steps {trainer.max_steps:,}  run dir {trainer.run_dir}"
    )
    if trainer.dist.enabled:
        console.info(f"data-parallel: {trainer.dist.describe()}")
    terms = " + ".join(f"{term.weight:g} {name}" for name, term in trainer.loss.terms)
    console.info(f"strategy {type(trainer.strategy).__name__}  loss {terms}")
    rows = [[p, ", ".join(n)] for p, n in trainer.hooks.table()]
    console.table("hooks", ["point", "hooks (priority)"], rows, terminal=console.verbose)


def print_hook_timing(trainer: "DefaultTrainer") -> None:
    """The time spent in each hook at each point, as a table (``trainer.hook_timing: summary``, or
    ``auto`` when hooks took a noticeable share of the steps' time)."""
    hooks = trainer.hooks
    if not hooks.timing_report_due(trainer.train_seconds):
        return
    rows = hooks.timing_rows(trainer.train_seconds)
    total = sum(hooks.seconds.values())
    share = 100.0 * total / trainer.train_seconds if trainer.train_seconds > 0 else 0.0
    trainer.console.table(
        f"time in hooks: {total:.3f} s, {share:.2f}% of {trainer.train_seconds:.1f} s of training",
        ["hook", "point", "calls", "total s", "ms/call", "% of training"],
        rows,
    )


def write_results(trainer: "DefaultTrainer", path: Path) -> Dict[str, Any]:
    """results.json: the last validation's metrics (psnr, cc_psnr, ssim, lpips), Gaussians, steps,
    training time, per-view scores, what the view corrections learned (when on), and
    ``stopped: {step, reason}`` when a hook ended the run early."""
    metrics = trainer.last_metrics
    results = {
        "psnr": metrics.get("psnr"),
        "cc_psnr": metrics.get("cc_psnr"),
        "ssim": metrics.get("ssim"),
        "lpips": metrics.get("lpips"),
        "num_gaussians": trainer.model.num_gaussians,
        "steps": trainer.step,
        "train_seconds": round(trainer.train_seconds, 3),
        **trainer.view_opt.report(),
        "per_view": trainer.val_per_view,
    }
    if trainer.stopped is not None:
        results["stopped"] = trainer.stopped
    if trainer.is_main:
        atomic_write_text(path, json.dumps(results, indent=2) + "\n")
    return results
