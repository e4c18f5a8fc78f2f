"""Video frames for structure from motion: decoded by imageio-ffmpeg, the sharpest of each stretch kept.

The video is cut into ``count`` equal stretches of frames and the sharpest frame of each is
kept, sharpness being the variance of the Laplacian of the grey image (motion blur and
defocus lower it). A manifest records the video and the options, so a second run with the
same ones reuses the frames.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np

from ..errors import UserError
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


def extract_frames(video: Path, out: Path, options: FrameOptions,
                   progress: Callable[[int, int], None] = lambda done, total: None,
                   stop: Callable[[], None] = lambda: None) -> FrameReport:
    """Write the sharpest frame of each stretch of ``video`` to ``out`` as JPEG files
    (``frame_00001.jpg``, ...). ``progress(decoded, total)`` follows decoding; ``stop()`` is
    called between frames (it raises to interrupt). UserError for a file ffmpeg cannot read."""
    manifest = out / MANIFEST
    key = {"video": str(video.resolve()), "size": video.stat().st_size, "mtime": video.stat().st_mtime,
           "options": asdict(options)}
    if manifest.is_file():
        saved = json.loads(manifest.read_text())
        if saved.get("key") == key:
            return FrameReport(**saved["report"], reused=True)
    ffmpeg = require("imageio_ffmpeg")
    try:
        reader = ffmpeg.read_frames(str(video))
        meta = reader.__next__()
    except (RuntimeError, OSError, StopIteration) as err:
        raise UserError(f"{video}: not a readable video ({str(err).splitlines()[0] if str(err) else 'no frames'})") from err
    width, height = meta["size"]
    total, count = _stretches(meta, options)
    best: List[Optional[tuple[float, bytes]]] = [None] * count
    scores: List[float] = []
    decoded = 0
    try:
        for raw in reader:
            frame = np.frombuffer(raw, np.uint8).reshape(height, width, 3)
            score = sharpness(frame)
            scores.append(score)
            slot = min(count - 1, decoded * count // total)
            if best[slot] is None or score > best[slot][0]:  # type: ignore[index]
                best[slot] = (score, raw)
            decoded += 1
            progress(decoded, total)
            stop()
    except RuntimeError as err:
        raise UserError(f"{video}: ffmpeg stopped decoding after {decoded} frames ({str(err).splitlines()[0]})") from err
    finally:
        reader.close()
    kept = [b for b in best if b is not None]
    if not kept:
        raise UserError(f"{video}: no frames could be decoded")
    _write_frames(kept, out, (width, height), options.max_size)
    report = FrameReport(decoded=decoded, kept=len(kept), video_fps=float(meta.get("fps") or 0.0),
                         sharpness_kept=float(np.mean([s for s, _ in kept])), sharpness_all=float(np.mean(scores)))
    manifest.write_text(json.dumps({"key": key, "report": {k: v for k, v in asdict(report).items() if k != "reused"}}))
    return report


def _write_frames(kept: List[tuple[float, bytes]], out: Path, size: tuple[int, int], max_size: int) -> None:
    """The kept frames as ``frame_NNNNN.jpg`` (quality 95), shrunk to ``max_size`` pixels on their long side."""
    from PIL import Image

    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("frame_*.jpg"):
        old.unlink()
    width, height = size
    scale = min(1.0, max_size / max(width, height))
    target = (max(1, round(width * scale)), max(1, round(height * scale)))
    for index, (_, raw) in enumerate(kept, start=1):
        image = Image.frombytes("RGB", size, raw)
        if target != size:
            image = image.resize(target, Image.Resampling.LANCZOS)
        image.save(out / f"frame_{index:05d}.jpg", quality=95)
