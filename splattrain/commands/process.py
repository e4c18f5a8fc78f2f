"""``splattrain process INPUT OUTPUT``: photos or a video to a COLMAP scene that ``fit`` trains."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from rich.markup import escape

from ..console import Console
from ..errors import UserError
from ..io.atomic import atomic_write_text
from ..process import database, require
from ..process.display import Stage
from ..process.frames import FrameOptions, extract_frames
from ..process.inputs import input_kind, list_images
from ..process.layout import (DISTORTION_TOLERANCE_PX, OUTPUTS, needs_undistortion, staging_folder, write_downscaled,
                               write_scene)
from ..process.lock import LOCK_NAME, OutputLock, refuse_if_held
from ..process.options import DEFAULT_MAX_MEGAPIXELS
from ..process.ownership import keep_only_own, record_work
from ..process.photos import check_photos, describe_refused
from ..process.sfm import (SfmOptions, extract, left_out, map_scene, match, pairs_to_match, pick_cameras, pick_device,
                           pick_matcher, sift_threads)
from ..process.workspace import Workspace, claim, inspect, output_folder, publish

MIN_REGISTERED = 3
#: The first bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"


def _check_database(db: Path) -> None:
    """A ``database.db`` already there must be a regular SQLite file (COLMAP's), never replaced
    unasked: UserError naming it otherwise."""
    if not db.exists():
        return
    if not db.is_file():
        raise UserError(f"{db}: not a file; splattrain process keeps its COLMAP database there: move it away")
    with db.open("rb") as handle:
        header = handle.read(len(SQLITE_HEADER))
    if header and header != SQLITE_HEADER:
        raise UserError(f"{db}: not a COLMAP database (not an SQLite file); move it away to start a new one")
    tables = database.table_names(db)
    if tables and not {"cameras", "images"} <= tables:
        raise UserError(f"{db}: an SQLite database that is not COLMAP's (tables {', '.join(sorted(tables)[:5])}); "
                        "move it away to start a new one")


def _fresh_database(work: Path, key: Dict[str, Any], console: Console) -> None:
    """Start a new database when the input or the camera options differ from the last run's
    (or the record of those, ``options.json``, is missing or damaged: it is rebuilt)."""
    saved, db = work / "options.json", work / "database.db"
    _check_database(db)  # a file that is not COLMAP's is never deleted
    same = False
    if saved.is_file():
        try:
            same = json.loads(saved.read_text(encoding="utf-8")) == key
        except (OSError, ValueError):
            console.warning(f"{saved} was damaged; it is written again and the database started afresh")
    if not same:
        db.unlink(missing_ok=True)
        for extra in ("database.db-wal", "database.db-shm"):
            (work / extra).unlink(missing_ok=True)
    atomic_write_text(saved, json.dumps(key, indent=1))


def _log_to(work: Optional[Path]) -> None:
    """COLMAP's own log lines go to ``work/colmap.log.*`` instead of the terminal (its INFO file
    holds every severity: none goes to the temporary folder); ``None`` closes that file, so
    that it is complete when the marker records it."""
    pycolmap = require("pycolmap")
    pycolmap.logging.logtostderr = False
    pycolmap.logging.alsologtostderr = False
    pycolmap.logging.stderrthreshold = pycolmap.logging.Level.FATAL.value
    levels = pycolmap.logging.Level
    for level in (levels.WARNING, levels.ERROR):
        pycolmap.logging.set_log_destination(level, "")
    pycolmap.logging.set_log_destination(levels.INFO, "" if work is None else str(work / "colmap.log."))


@contextmanager
def _owned(src: Path, out: Path, console: Console) -> Iterator[Workspace]:
    """The output folder, held by this process alone for the block (a lock file; another
    process there stops in one line), with everything in its work folder that process did not
    leave there moved aside first; what the work folder holds afterwards is recorded in the
    marker, however the block ends."""
    lock = OutputLock(out).acquire()
    try:
        space = claim(src, out, ignore=(LOCK_NAME,))
        moved, where = keep_only_own(space)
        if moved:
            names = ", ".join(path.split("/", 1)[1] for path in moved[:4]) + (
                f" and {len(moved) - 4} more" if len(moved) > 4 else "")
            console.warning(f"{space.work}: {names} not written by splattrain process, or changed since it wrote "
                            f"them: moved to {where}")
        try:
            yield space
        finally:
            if "pycolmap" in sys.modules:
                _log_to(None)
            record_work(space)
    finally:
        lock.release()


def _images(src: Path, photos: Optional[List[str]], work: Path, frames: FrameOptions,
            console: Console) -> tuple[Path, List[str]]:
    """(folder the photos are read from, their names): the input folder with its ``photos``, or
    frames of the video (``photos`` None)."""
    if photos is not None:
        return src.resolve(), photos
    require("imageio_ffmpeg")
    from .. import interrupts

    with Stage(console, "frames", 1, "frames decoded") as stage:
        def progress(done: int, total: int) -> None:
            if max(total, done) != stage.total:
                stage.set_total(max(total, done))
            stage.update(done)

        report = extract_frames(src, work / "frames", frames, progress=progress, stop=interrupts.check,
                                warn=console.warning)
        stage.set_total(report.decoded)
        stage.update(report.decoded)
        stage.note = (f"kept the sharpest of each stretch: {report.kept} frames, mean sharpness "
                      f"{report.sharpness_kept:.0f} vs {report.sharpness_all:.0f} over all frames"
                      + ("; reused from the last run" if report.reused else ""))
    if not report.reused:
        (work / "database.db").unlink(missing_ok=True)
    return work / "frames", list_images(work / "frames")


def _usable(image_dir: Path, names: List[str], max_megapixels: float, console: Console,
            src: Path) -> tuple[List[str], Dict[str, str], tuple[int, int]]:
    """(the photos COLMAP may read, each other one with the reason, the largest size): each is
    decoded and its size checked first; the others are named in one warning and skipped."""
    from .. import interrupts

    with Stage(console, "check", len(names), "images") as stage:
        usable, refused = check_photos(image_dir, names, int(max_megapixels * 1e6), stage.update, interrupts.check)
        stage.note = f"{len(refused)} skipped" if refused else "every image decodes"
    if len(usable) < MIN_REGISTERED:
        what = f" ({describe_refused(refused)})" if refused else ""
        raise UserError(f"{src}: {len(usable)} usable image(s) of {len(names)}{what}; structure from motion needs "
                        f"at least {MIN_REGISTERED}")
    if refused:
        console.warning(f"skipped {len(refused)} of {len(names)} images: {describe_refused(refused)}")
    largest = max(usable.values(), key=lambda size: size[0] * size[1])
    return list(usable), refused, largest


def process(input_path: str, output_path: str, console: Console, sfm: SfmOptions = SfmOptions(),
            frames: FrameOptions = FrameOptions(), max_megapixels: float = DEFAULT_MAX_MEGAPIXELS) -> Dict[str, Any]:
    """Run every stage; returns the summary figures (also printed). The paths, the output folder
    and the photos are checked before anything is written."""
    require("pycolmap")
    src, out = Path(input_path), output_folder(output_path)
    kind = input_kind(src)
    camera, camera_model = pick_cameras(sfm.camera, sfm.camera_model, kind)
    sfm = replace(sfm, camera=camera, camera_model=camera_model)
    refuse_if_held(out)  # a run in progress is named first: what it is writing fails the checks below
    inspect(src, out, ignore=(LOCK_NAME,))
    photos = list_images(src) if kind == "images" else None
    with _owned(src, out, console) as space:
        summary = _stages(space, src, kind, photos, sfm, frames, max_megapixels, console)
    _print_summary(console, summary, out)
    return summary


def _stages(space: Workspace, src: Path, kind: str, photos: Optional[List[str]], sfm: SfmOptions,
            frames: FrameOptions, max_megapixels: float, console: Console) -> Dict[str, Any]:
    """Every stage in the claimed output folder; returns the summary figures."""
    work = space.work
    _log_to(work)
    device, why = pick_device(sfm.device)
    console.info(f"device: {why}")
    _fresh_database(work, {"input": str(src.resolve()), "camera": sfm.camera, "camera_model": sfm.camera_model},
                    console)
    image_dir, listed = _images(src, photos, work, frames, console)
    if len(listed) < MIN_REGISTERED:
        raise UserError(f"{src}: {len(listed)} image(s); structure from motion needs at least {MIN_REGISTERED}")
    names, skipped, largest = _usable(image_dir, listed, max_megapixels, console, src)
    matcher = pick_matcher(sfm.matcher, kind)
    console.info(f"{len(names)} images from {src}; {matcher} matching, {sfm.mapper} mapping, "
                 f"{sfm.camera} camera ({sfm.camera_model})")
    timings: Dict[str, float] = {}
    models, kept = _reconstruct(work, image_dir, names, sfm, device, sift_threads(largest, device), matcher, timings,
                                console)
    registered = models[kept].num_reg_images() if models else 0
    reasons = {**skipped, **(left_out(work / "database.db", names, models, kept) if models else {})}
    if registered < MIN_REGISTERED:
        raise UserError(f"{src}: only {registered} of {len(names)} images could be registered ({MIN_REGISTERED} needed); "
                        f"the photos overlap too little or are too blurry (details in {work}/colmap.log.INFO)")
    model = models[kept]
    if len(models) > 1:
        sizes = ", ".join(str(m.num_reg_images()) for m in models.values())
        console.warning(f"mapping found {len(models)} disconnected models ({sizes} images); kept the largest, "
                        f"{registered} images (the others are in {work / 'sparse'})")
    undistort, shift = _write_scene(space, model, kept, image_dir, registered, timings, console)
    summary = {"images": len(listed), "registered": registered, "points": model.num_points3D(),
               "mean_reprojection_error_px": float(model.compute_mean_reprojection_error()),
               "mean_track_length": float(model.compute_mean_track_length()), "models": len(models),
               "undistorted": undistort, "max_distortion_px": shift, "left_out": reasons, "seconds": timings,
               "options": {**asdict(sfm), "matcher": matcher}}
    atomic_write_text(work / "summary.json", json.dumps(summary, indent=1))
    return summary


def _reconstruct(work: Path, image_dir: Path, names: List[str], sfm: SfmOptions, device: Any, threads: int,
                 matcher: str, timings: Dict[str, float], console: Console) -> Tuple[Dict[int, Any], Optional[int]]:
    """Features, matching and mapping: (the models found, largest first; the largest's id)."""
    db = work / "database.db"
    with Stage(console, "features", len(names), "images") as stage:
        reused = extract(db, image_dir, names, sfm, device, stage.update, threads)
        stage.note = f"{reused} reused from the last run" if reused else ""
    timings["features"] = stage.seconds
    pairs = pairs_to_match(names, matcher)
    with Stage(console, "matching", len(pairs), "pairs") as stage:
        reused = match(db, pairs, device, work, stage.update)
        stage.note = f"{reused} pairs reused from the last run" if reused else ""
    timings["matching"] = stage.seconds
    with Stage(console, "mapping", len(names), "images") as stage:
        models = map_scene(db, image_dir, work / "sparse", sfm.mapper, stage.update)
        kept = next(iter(models), None)
        stage.update(models[kept].num_reg_images() if models else 0)
    timings["mapping"] = stage.seconds
    return models, kept


def _write_scene(space: Workspace, model: Any, kept: int, image_dir: Path, registered: int,
                 timings: Dict[str, float], console: Console) -> Tuple[bool, float]:
    """The scene's folders, written in the work folder and then moved in place of the last run's
    (moved aside); returns (whether the photos were undistorted, the lens model's largest shift)."""
    work = space.work
    undistort, shift = needs_undistortion(model)
    staged = staging_folder(work)
    with Stage(console, "images", registered, "images") as stage:
        kept_names = write_scene(model, work / "sparse" / str(kept), image_dir, staged, undistort, work, stage.update)
        stage.note = (f"undistorted to pinhole: the lens model moves pixels by up to {shift:.1f} px" if undistort else
                      f"pinhole cameras, copied as they are: the lens model moves no pixel by more than "
                      f"{DISTORTION_TOLERANCE_PX} px (at most {shift:.2f} px)")
    timings["images"] = stage.seconds
    with Stage(console, "downscale", len(kept_names), "images") as stage:
        write_downscaled(staged, kept_names, stage.update)
        stage.note = "images_2, images_4, images_8"
    timings["downscale"] = stage.seconds
    aside = publish(space, staged, OUTPUTS)
    staged.rmdir()
    if aside is not None:
        console.info(f"the scene of the last run was moved to {aside}")
    return undistort, shift


def _print_summary(console: Console, summary: Dict[str, Any], out: Path) -> None:
    rows = [["registered images", f"{summary['registered']} of {summary['images']}"],
            ["3D points", str(summary["points"])],
            ["mean reprojection error", f"{summary['mean_reprojection_error_px']:.3f} px"],
            ["mean track length", f"{summary['mean_track_length']:.2f}"],
            ["time", "  ".join(f"{k} {v:.1f} s" for k, v in summary["seconds"].items())]]
    console.table("splattrain process", ["figure", "value"], rows)
    if summary["left_out"]:
        console.table("images left out", ["image", "why"],
                      [[escape(name), why] for name, why in sorted(summary["left_out"].items())])
    console.info(f"scene written to {out} ({', '.join(OUTPUTS)}); train it with:")
    console.info(f"  splattrain fit --config configs/colmap.yaml data.path={out}")


def from_arguments(args: argparse.Namespace) -> Tuple[SfmOptions, FrameOptions, float]:
    """The parsed options as (SfmOptions, FrameOptions, the photos' pixel limit in millions);
    UserError for values out of range."""
    if args.frames < 3:
        raise UserError(f"--frames must be at least 3, got {args.frames}")
    if args.fps is not None and not args.fps > 0:
        raise UserError(f"--fps must be positive, got {args.fps}")
    if args.max_size < 64:
        raise UserError(f"--max-size must be at least 64 pixels, got {args.max_size}")
    if not 0.01 <= args.max_megapixels <= 10_000:
        raise UserError(f"--max-megapixels must be between 0.01 and 10000, got {args.max_megapixels}")
    sfm = SfmOptions(matcher=args.matcher, mapper=args.mapper, camera=args.camera, camera_model=args.camera_model,
                     device=args.device)
    return sfm, FrameOptions(count=args.frames, fps=args.fps, max_size=args.max_size), args.max_megapixels
