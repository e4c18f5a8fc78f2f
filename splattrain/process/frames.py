"""Video frames for structure from motion: decoded by imageio-ffmpeg, the sharpest of each stretch kept.

The video is cut into ``count`` equal stretches of frames and the sharpest frame of each is
kept, sharpness being the variance of the Laplacian of the grey image (motion blur and
defocus lower it). Frames are shrunk by ffmpeg while they are decoded, so an 8K video costs
this process no more memory than a small one. A manifest (written atomically, last) records the
video and the options, so a second run with the same ones reuses the frames; a damaged one
makes the frames be extracted again.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import numpy as np

from ..errors import UserError
from ..io.atomic import atomic_write_text
from . import require
from .options import DEFAULT_FRAMES, DEFAULT_MAX_SIZE

MANIFEST = "frames.json"


@dataclass(frozen=True)
class FrameOptions:
    """Which frames to keep: ``count`` frames, or ``fps`` frames per second of video when set;
    frames wider or taller than ``max_size`` are shrunk to it."""

    count: int = DEFAULT_FRAMES
    fps: Optional[float] = None
    max_size: int = DEFAULT_MAX_SIZE


@dataclass
class FrameReport:
    """What the frame stage did: frames decoded and kept, the video's rate, sharpness of the kept ones."""

    decoded: int
    kept: int
    video_fps: float
    sharpness_kept: float
    sharpness_all: float
    reused: bool = False


def sharpness(rgb: np.ndarray) -> float:
    """Variance of the 4-neighbour Laplacian of the grey image (higher is sharper)."""
    grey = rgb.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
    lap = grey[1:-1, :-2] + grey[1:-1, 2:] + grey[:-2, 1:-1] + grey[2:, 1:-1] - 4.0 * grey[1:-1, 1:-1]
    return float(lap.var())


def _stretches(meta: Dict, options: FrameOptions) -> tuple[int, int]:
    """(frames in the video as its header says, stretches to cut it into)."""
    fps = float(meta.get("fps") or 0.0)
    duration = float(meta.get("duration") or 0.0)
    total = max(1, int(round(fps * duration)))
    wanted = options.count if options.fps is None else max(1, int(round(duration * options.fps)))
    return total, max(1, min(wanted, total))


def _scale_filter(max_size: int) -> List[str]:
    """ffmpeg output options shrinking each frame, as it is decoded, to at most ``max_size`` pixels
    on its long side (aspect kept; frames already that small untouched; Lanczos like before)."""
    return ["-vf", f"scale=w='min(iw,{max_size})':h='min(ih,{max_size})':force_original_aspect_ratio=decrease"
                   ":flags=lanczos"]


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Logger ``name`` shows errors only, meanwhile."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _read_manifest(manifest: Path, key: Dict, warn: Callable[[str], None]) -> Optional[FrameReport]:
    """The report of frames already extracted with ``key`` (None when they were extracted with
    other options, or the manifest is damaged: ``warn`` says so, and the frames are extracted again)."""
    try:
        saved = json.loads(manifest.read_text(encoding="utf-8"))
        if saved.get("key") != key:
            return None
        return FrameReport(**saved["report"], reused=True)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        warn(f"{manifest} was damaged; the frames are extracted again")
    return None


def extract_frames(video: Path, out: Path, options: FrameOptions,
                   progress: Callable[[int, int], None] = lambda done, total: None,
                   stop: Callable[[], None] = lambda: None,
                   warn: Callable[[str], None] = lambda message: None) -> FrameReport:
    """Write the sharpest frame of each stretch of ``video`` to ``out`` as JPEG files
    (``frame_00001.jpg``, ...). ffmpeg shrinks every frame to ``options.max_size`` as it decodes
    it, and each stretch's frame is written as soon as the stretch ends, so memory holds two
    frames of at most that size whatever the video's. ``progress(decoded, total)`` follows
    decoding; ``stop()`` is called between frames (it raises to interrupt); ``warn`` receives a
    note on a damaged manifest. UserError for a file ffmpeg cannot read."""
    manifest = out / MANIFEST
    key = {"video": str(video.resolve()), "size": video.stat().st_size, "mtime": video.stat().st_mtime,
           "options": asdict(options)}
    if manifest.is_file():
        reused = _read_manifest(manifest, key, warn)
        if reused is not None:
            return reused
    ffmpeg = require("imageio_ffmpeg")
    try:
        reader = ffmpeg.read_frames(str(video), output_params=_scale_filter(options.max_size))
        with _quiet("imageio_ffmpeg"):  # it notes, as a warning, that the frames are shrunk
            meta = reader.__next__()
    except (RuntimeError, OSError, StopIteration) as err:
        raise UserError(f"{video}: not a readable video ({str(err).splitlines()[0] if str(err) else 'no frames'})") from None
    width, height = meta["size"]
    total, count = _stretches(meta, options)
    _clear(out)
    best: Optional[tuple[float, np.ndarray]] = None
    scores: List[float] = []
    kept: List[float] = []
    decoded, slot = 0, 0
    try:
        for raw in reader:
            frame = np.frombuffer(raw, np.uint8).reshape(height, width, 3)
            score = sharpness(frame)
            scores.append(score)
            here = min(count - 1, decoded * count // total)
            if here != slot and best is not None:  # the last stretch ended: its sharpest frame is final
                kept.append(_write_frame(out, len(kept) + 1, *best))
                best = None
            slot = here
            if best is None or score > best[0]:
                best = (score, frame)
            decoded += 1
            progress(decoded, total)
            stop()
    except RuntimeError as err:
        raise UserError(f"{video}: ffmpeg stopped decoding after {decoded} frames ({str(err).splitlines()[0]})") from None
    finally:
        reader.close()
    if best is not None:
        kept.append(_write_frame(out, len(kept) + 1, *best))
    if not kept:
        raise UserError(f"{video}: no frames could be decoded")
    report = FrameReport(decoded=decoded, kept=len(kept), video_fps=float(meta.get("fps") or 0.0),
                         sharpness_kept=float(np.mean(kept)), sharpness_all=float(np.mean(scores)))
    atomic_write_text(manifest, json.dumps({"key": key, "report": {k: v for k, v in asdict(report).items()
                                                                    if k != "reused"}}))
    return report


def _clear(out: Path) -> None:
    """Remove the frames (and manifest) an earlier extraction left in ``out``: the work folder's own files."""
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    for old in out.glob("frame_*.jpg"):
        old.unlink()


def _write_frame(out: Path, index: int, score: float, frame: np.ndarray) -> float:
    """``frame`` as ``frame_NNNNN.jpg`` (quality 95); returns its sharpness."""
    from PIL import Image

    Image.fromarray(frame).save(out / f"frame_{index:05d}.jpg", quality=95)
    return score
