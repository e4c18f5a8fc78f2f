"""``splattrain process INPUT OUTPUT``: photos or a video to a COLMAP scene that ``fit`` trains."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
import argparse
from typing import Any, Dict, List, Tuple

from rich.markup import escape

from ..console import Console
from ..errors import UserError
from ..process import require
from ..process.display import Stage
from ..process.frames import FrameOptions, extract_frames
from ..process.inputs import input_kind, list_images
from ..process.layout import DISTORTION_TOLERANCE_PX, OUTPUTS, needs_undistortion, write_downscaled, write_scene
from ..process.sfm import (SfmOptions, extract, left_out, map_scene, match, pairs_to_match, pick_cameras, pick_device,
                           pick_matcher)

#: Folder inside OUTPUT for the database, the raw models, video frames and COLMAP's log.
WORK = "colmap"
MIN_REGISTERED = 3


def _check_output(src: Path, out: Path) -> Path:
    """The work folder ``out/colmap``; UserError when ``out`` cannot be used."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: output exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / WORK).is_dir():
        raise UserError(f"{out}: output folder is not empty and was not written by splattrain process; give a new folder")
    if src.is_dir() and out.resolve().is_relative_to(src.resolve()):
        raise UserError(f"{out}: output folder is inside the input folder {src}; put it elsewhere")
    work = out / WORK
    work.mkdir(parents=True, exist_ok=True)
    return work


def _fresh_database(work: Path, key: Dict[str, Any]) -> None:
    """Start a new database when the input or the camera options differ from the last run's."""
    saved = work / "options.json"
    if saved.is_file() and json.loads(saved.read_text()) != key:
        (work / "database.db").unlink(missing_ok=True)
    saved.write_text(json.dumps(key, indent=1))


def _log_to(work: Path) -> None:
    """COLMAP's own log lines go to ``work/colmap.log.*`` instead of the terminal."""
    pycolmap = require("pycolmap")
    pycolmap.logging.logtostderr = False
    pycolmap.logging.alsologtostderr = False
    pycolmap.logging.stderrthreshold = pycolmap.logging.Level.FATAL.value
    pycolmap.logging.set_log_destination(pycolmap.logging.Level.INFO, str(work / "colmap.log."))


def _images(src: Path, kind: str, work: Path, frames: FrameOptions, console: Console) -> tuple[Path, List[str]]:
    """(folder the photos are read from, their names): the input folder, or frames of the video."""
    if kind == "images":
        return src.resolve(), list_images(src)
    require("imageio_ffmpeg")
    from .. import interrupts

    with Stage(console, "frames", 1, "frames decoded") as stage:
        def progress(done: int, total: int) -> None:
            if max(total, done) != stage.total:
                stage.set_total(max(total, done))
            stage.update(done)

        report = extract_frames(src, work / "frames", frames, progress=progress, stop=interrupts.check)
        stage.set_total(report.decoded)
        stage.update(report.decoded)
        stage.note = (f"kept the sharpest of each stretch: {report.kept} frames, mean sharpness "
                      f"{report.sharpness_kept:.0f} vs {report.sharpness_all:.0f} over all frames"
                      + ("; reused from the last run" if report.reused else ""))
    if not report.reused:
        (work / "database.db").unlink(missing_ok=True)
    return work / "frames", list_images(work / "frames")


def process(input_path: str, output_path: str, console: Console, sfm: SfmOptions = SfmOptions(),
            frames: FrameOptions = FrameOptions()) -> Dict[str, Any]:
    """Run every stage; returns the summary figures (also printed)."""
    require("pycolmap")
    src, out = Path(input_path), Path(output_path)
    kind = input_kind(src)
    camera, camera_model = pick_cameras(sfm.camera, sfm.camera_model, kind)
    sfm = replace(sfm, camera=camera, camera_model=camera_model)
    work = _check_output(src, out)
    _log_to(work)
    device, why = pick_device(sfm.device)
    console.info(f"device: {why}")
    _fresh_database(work, {"input": str(src.resolve()), "camera": sfm.camera, "camera_model": sfm.camera_model})
    image_dir, names = _images(src, kind, work, frames, console)
    if len(names) < MIN_REGISTERED:
        raise UserError(f"{src}: {len(names)} image(s); structure from motion needs at least {MIN_REGISTERED}")
    matcher = pick_matcher(sfm.matcher, kind)
    console.info(f"{len(names)} images from {src}; {matcher} matching, {sfm.mapper} mapping, "
                 f"{sfm.camera} camera ({sfm.camera_model})")
    db = work / "database.db"
    timings: Dict[str, float] = {}

    with Stage(console, "features", len(names), "images") as stage:
        reused = extract(db, image_dir, names, sfm, device, stage.update)
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
    registered = models[kept].num_reg_images() if models else 0
    reasons = left_out(db, names, models, kept) if models else {}
    if registered < MIN_REGISTERED:
        raise UserError(f"{src}: only {registered} of {len(names)} images could be registered ({MIN_REGISTERED} needed); "
                        f"the photos overlap too little or are too blurry (details in {work}/colmap.log.INFO)")
    model = models[kept]
    if len(models) > 1:
        sizes = ", ".join(str(m.num_reg_images()) for m in models.values())
        console.warning(f"mapping found {len(models)} disconnected models ({sizes} images); kept the largest, "
                        f"{registered} images (the others are in {work / 'sparse'})")

    undistort, shift = needs_undistortion(model)
    with Stage(console, "images", registered, "images") as stage:
        kept_names = write_scene(model, work / "sparse" / str(kept), image_dir, out, undistort, work, stage.update)
        stage.note = (f"undistorted to pinhole: the lens model moves pixels by up to {shift:.1f} px" if undistort else
                      f"pinhole cameras, copied as they are: the lens model moves no pixel by more than "
                      f"{DISTORTION_TOLERANCE_PX} px (at most {shift:.2f} px)")
    timings["images"] = stage.seconds
    with Stage(console, "downscale", len(kept_names), "images") as stage:
        write_downscaled(out, kept_names, stage.update)
        stage.note = "images_2, images_4, images_8"
    timings["downscale"] = stage.seconds

    summary = {"images": len(names), "registered": registered, "points": model.num_points3D(),
               "mean_reprojection_error_px": float(model.compute_mean_reprojection_error()),
               "mean_track_length": float(model.compute_mean_track_length()), "models": len(models),
               "undistorted": undistort, "max_distortion_px": shift, "left_out": reasons, "seconds": timings,
               "options": {**asdict(sfm), "matcher": matcher}}
    (work / "summary.json").write_text(json.dumps(summary, indent=1))
    _print_summary(console, summary, out)
    return summary


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


def from_arguments(args: argparse.Namespace) -> Tuple[SfmOptions, FrameOptions]:
    """The parsed options as (SfmOptions, FrameOptions); UserError for values out of range."""
    if args.frames < 3:
        raise UserError(f"--frames must be at least 3, got {args.frames}")
    if args.fps is not None and not args.fps > 0:
        raise UserError(f"--fps must be positive, got {args.fps}")
    if args.max_size < 64:
        raise UserError(f"--max-size must be at least 64 pixels, got {args.max_size}")
    sfm = SfmOptions(matcher=args.matcher, mapper=args.mapper, camera=args.camera, camera_model=args.camera_model,
                     device=args.device)
    return sfm, FrameOptions(count=args.frames, fps=args.fps, max_size=args.max_size)
