"""``splattrain render``: frames along the test cameras or an orbit, plus an animation."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from PIL import Image
from rich.progress import Progress

from ..cameras import Camera
from .. import interrupts
from ..console import Console
from ..data.pipeline import focus_point
from ..engine.run_folder import command_output
from ..errors import UserError
from ..files import OutputFolder
from ..io.atomic import atomic_path
from ..io.depth_maps import save_depth_maps
from ..io.limits import gib
from ..io.png import save_png, to_uint8
from ..render import Renderer, RenderResult
from .snapshot import Snapshot, load_snapshot


#: What ``--depth`` takes: which depth maps ``render`` writes beside the frames.
DEPTH_CHOICES = ("median", "expected", "none")


def look_at(position: torch.Tensor, target: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """World-to-camera [4, 4] (OpenCV axes) for a camera at ``position`` looking at ``target``."""
    forward = torch.nn.functional.normalize(target - position, dim=0)
    right = torch.nn.functional.normalize(torch.linalg.cross(forward, up), dim=0)
    down = torch.linalg.cross(forward, right)
    rotation = torch.stack([right, down, forward])
    viewmat = torch.eye(4)
    viewmat[:3, :3] = rotation
    viewmat[:3, 3] = -rotation @ position
    return viewmat


def orbit_cameras(cameras: List[Camera], frames: int) -> List[Camera]:
    """``frames`` cameras circling the point the given cameras look at, at their mean height and distance."""
    center = focus_point(cameras)
    up = torch.nn.functional.normalize(torch.stack([-c.viewmat[1, :3] for c in cameras]).mean(0), dim=0)
    offsets = torch.stack([c.center for c in cameras]) - center
    height = float((offsets @ up).mean())
    radius = float((offsets - (offsets @ up)[:, None] * up).norm(dim=1).mean())
    # an orthonormal basis of the orbit plane
    helper = torch.tensor([1.0, 0.0, 0.0]) if abs(float(up[0])) < 0.9 else torch.tensor([0.0, 1.0, 0.0])
    u = torch.nn.functional.normalize(torch.linalg.cross(up, helper), dim=0)
    v = torch.linalg.cross(up, u)
    template = cameras[0]
    out = []
    for i in range(frames):
        angle = 2 * math.pi * i / frames
        position = center + up * height + radius * (math.cos(angle) * u + math.sin(angle) * v)
        out.append(Camera(look_at(position, center, up), template.K.clone(), template.width, template.height, f"orbit_{i:04d}"))
    return out


def video_writer_available() -> bool:
    """True when imageio with its ffmpeg plugin is installed (MP4 output)."""
    return importlib.util.find_spec("imageio") is not None and importlib.util.find_spec("imageio_ffmpeg") is not None


#: The most memory a GIF's frames may take while Pillow builds it (it holds them all, a byte a pixel);
#: a larger animation is written as MP4 only.
GIF_MAX_BYTES = 1 << 30
#: Bytes a pixel may take on disk at most: the frame PNG (3) and the GIF (1); with depth also the
#: 16-bit PNG (2), the float32 .npy (4) and the coloured preview (3).
DISK_BYTES_PER_PIXEL = {False: 4, True: 13}


def _plan(cameras: List[Camera], out_dir: Path, depth: bool, console: Console) -> bool:
    """Say, before anything is rendered, how much disk the render takes at most (a warning when it
    is more than is free there) and whether the GIF is made; returns whether it is."""
    pixels = sum(camera.width * camera.height for camera in cameras)
    disk = pixels * DISK_BYTES_PER_PIXEL[depth]
    gif = pixels <= GIF_MAX_BYTES
    console.info(f"rendering {len(cameras)} frames into {out_dir}: at most about {gib(max(disk, 2**20))} on disk"
                 + ("" if gif else f"; no GIF (its frames would take {gib(pixels)} of memory while it is built, "
                                   f"more than {gib(GIF_MAX_BYTES)}): the frames and MP4 only"))
    existing = next(folder for folder in (out_dir, *out_dir.parents) if folder.exists())
    free = shutil.disk_usage(existing).free
    if disk > free:
        console.warning(f"render: the frames may take up to {gib(disk)}, more than the {gib(free)} free in {existing}")
    return gif


def _save(frames: List[Path], folder: OutputFolder, fps: int, gif: bool) -> Dict[str, Path]:
    """The GIF (when ``gif``) and the MP4 (when imageio-ffmpeg is installed), built from the frame
    files on disk one at a time."""
    written: Dict[str, Path] = {}
    if gif:
        path = folder.file("render.gif")
        images = _read_frames(frames)
        with atomic_path(path) as tmp:
            next(images).save(tmp, format="GIF", save_all=True, append_images=images, duration=int(1000 / fps), loop=0)
        written["gif"] = path
    if video_writer_available():
        import imageio.v2 as imageio

        mp4 = folder.file("render.mp4")
        with atomic_path(mp4) as tmp:
            staged = tmp.with_suffix(".mp4")  # ffmpeg picks the container by the file's suffix
            try:
                with imageio.get_writer(staged, fps=fps, format="FFMPEG", codec="libx264") as video:
                    for image in _read_frames(frames):
                        video.append_data(np.asarray(image))
                staged.replace(tmp)
            finally:
                staged.unlink(missing_ok=True)
        written["mp4"] = mp4
    return written


def _read_frames(frames: List[Path]) -> Iterator[Image.Image]:
    """The frame PNGs, read one at a time."""
    for frame in frames:
        interrupts.check()
        with Image.open(frame) as image:
            yield image.convert("RGB")


@torch.no_grad()
def render(
    target: str | Path,
    console: Console,
    path: str = "test",
    out: Optional[str | Path] = None,
    frames: int = 60,
    fps: int = 15,
    device: str = "auto",
    imports: Sequence[str] = (),
    trust_config: bool = False,
    depth: str = "median",
) -> Dict[str, object]:
    """Render PNG frames along ``path`` ('test' cameras or an 'orbit') and an animated GIF (MP4 when
    possible), and with ``depth`` ('median', 'expected'; 'none' for no depth) each frame's depth map
    in ``depth/``: a 16-bit PNG (its scale in the PNG's ``depth_scale`` text and in
    ``depth/depth_scale.json``), float32 ``.npy`` and a coloured ``_preview.png``. Each frame is
    written as it is rendered; the animations are built from the files."""
    if path not in ("test", "orbit"):
        raise UserError(f"--path {path!r}: use 'test' or 'orbit'")
    if depth not in DEPTH_CHOICES:
        raise UserError(f"--depth {depth!r}: use one of {', '.join(DEPTH_CHOICES)}")
    snapshot = load_snapshot(target, device, imports, trust_config)
    folder = command_output(snapshot.run_dir, out, Path("renders") / f"{path}_step_{snapshot.step:06d}",
                            ["frames"] + ([] if depth == "none" else ["depth"]))
    data = snapshot.scene()
    scene = snapshot.views("test", data)
    cameras = [f.camera for f in scene.test_frames]
    if path == "orbit":
        cameras = orbit_cameras([f.camera for f in scene.train_frames], frames)
    renderer = snapshot.renderer(log=console.info, warn=console.warning, scene=data)
    gif = _plan(cameras, folder.path, depth != "none", console)
    written_frames, scales = _render_frames(snapshot, renderer, cameras, folder, depth, console)
    written = _save(written_frames, folder, fps, gif)
    if scales:
        with atomic_path(folder.file("depth", "depth_scale.json")) as tmp:
            tmp.write_text(json.dumps({"depth": depth, "units_per_level": scales}, indent=1) + "\n")
        written["depth"] = folder.path / "depth"
    if "mp4" not in written:
        console.info("MP4 skipped: install imageio and imageio-ffmpeg for video output")
    console.info(f"wrote {len(written_frames)} frames to {folder.path / 'frames'} and "
                 f"{', '.join(str(p) for p in written.values())}")
    return {"frames": len(written_frames), "out_dir": folder.path, **written}


def _render_frames(snapshot: Snapshot, renderer: Renderer, cameras: List[Camera], folder: OutputFolder,
                   depth: str, console: Console) -> Tuple[List[Path], Dict[str, float]]:
    """Render and write each frame (and its depth maps) as it comes; returns the frame files and
    the depth PNGs' scales. After the first frame of a long render, says how long it will take."""
    written: List[Path] = []
    scales: Dict[str, float] = {}
    started = time.perf_counter()
    with Progress(console=console.terminal, disable=console.quiet) as progress:
        task = progress.add_task(f"rendering {len(cameras)} frames", total=len(cameras))
        for index, camera in enumerate(cameras):
            interrupts.check()
            result = renderer.render(snapshot.model, [camera.to(snapshot.device)], snapshot.sh_degree, snapshot.background,
                                     depth=False if depth == "none" else depth)
            name = f"frame_{index:04d}"
            written.append(folder.file("frames", f"{name}.png"))
            save_png(written[-1], to_uint8(result.rgb[0]))
            if depth != "none":
                scales.update(_write_depth(result, renderer, folder, name, depth))
            if index == 0 and len(cameras) > 1:
                _say_duration(time.perf_counter() - started, len(cameras), console)
            progress.advance(task)
    return written, scales


def _write_depth(result: RenderResult, renderer: Renderer, folder: OutputFolder, name: str,
                 depth: str) -> Dict[str, float]:
    """Write a frame's depth maps into ``depth/``; returns its PNG's scale."""
    depth_map = result.median_depth if depth == "median" else result.depth
    if depth_map is None:
        raise UserError(f"renderer {type(renderer).__name__} rendered no {depth} depth; use --depth expected or none")
    for suffix in (".png", ".npy", "_preview.png"):
        folder.file("depth", name + suffix)  # a link where a depth map goes is refused
    saved = save_depth_maps(folder.path / "depth", name, depth_map[0, ..., 0].cpu().numpy(),
                            result.alpha[0, ..., 0].cpu().numpy())
    return {str(saved["png"]): float(saved["scale"])}  # type: ignore[arg-type]


#: A render expected to take longer than this many seconds says so after its first frame.
LONG_RENDER_SECONDS = 10.0


def _say_duration(first: float, frames: int, console: Console) -> None:
    """After the first frame: how long all ``frames`` will take, when that is long."""
    total = first * frames
    if total >= LONG_RENDER_SECONDS:
        console.info(f"the first frame took {first:.2f} s: about {total / 60:.1f} min for all {frames} frames")
