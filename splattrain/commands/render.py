"""``splattrain render``: frames along the test cameras or an orbit, plus an animation."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
from PIL import Image
from rich.progress import Progress

from ..cameras import Camera
from .. import interrupts
from ..console import Console
from ..data.pipeline import focus_point
from ..errors import UserError
from ..io.atomic import atomic_path
from ..io.png import save_png, to_uint8
from .snapshot import load_snapshot


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


def _save(frames: List[np.ndarray], out_dir: Path, fps: int) -> Dict[str, Path]:
    written: Dict[str, Path] = {}
    gif = out_dir / "render.gif"
    images = [Image.fromarray(f) for f in frames]
    with atomic_path(gif) as tmp:
        images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    written["gif"] = gif
    if video_writer_available():
        import imageio.v2 as imageio

        mp4 = out_dir / "render.mp4"
        with atomic_path(mp4) as tmp:
            staged = tmp.with_suffix(".mp4")  # ffmpeg picks the container by the file's suffix
            try:
                imageio.mimwrite(staged, frames, fps=fps, format="FFMPEG", codec="libx264")
                staged.replace(tmp)
            finally:
                staged.unlink(missing_ok=True)
        written["mp4"] = mp4
    return written


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
) -> Dict[str, object]:
    """Render PNG frames along ``path`` ('test' cameras or an 'orbit') and an animated GIF (MP4 when possible)."""
    if path not in ("test", "orbit"):
        raise UserError(f"--path {path!r}: use 'test' or 'orbit'")
    snapshot = load_snapshot(target, device, imports, trust_config)
    out_dir = Path(out) if out is not None else snapshot.run_dir / "renders" / f"{path}_step_{snapshot.step:06d}"
    scene = snapshot.views("test")
    cameras = [f.camera for f in scene.test_frames]
    if path == "orbit":
        cameras = orbit_cameras([f.camera for f in scene.train_frames], frames)
    renderer = snapshot.renderer(log=console.info, warn=console.warning)
    images: List[np.ndarray] = []
    with Progress(console=console.terminal, disable=console.quiet) as progress:
        task = progress.add_task(f"rendering {len(cameras)} frames", total=len(cameras))
        for index, camera in enumerate(cameras):
            interrupts.check()
            result = renderer.render(snapshot.model, [camera.to(snapshot.device)], snapshot.sh_degree, snapshot.background)
            image = to_uint8(result.rgb[0])
            images.append(image)
            save_png(out_dir / "frames" / f"frame_{index:04d}.png", image)
            progress.advance(task)
    written = _save(images, out_dir, fps)
    if "mp4" not in written:
        console.info("MP4 skipped: install imageio and imageio-ffmpeg for video output")
    console.info(f"wrote {len(images)} frames to {out_dir / 'frames'} and {', '.join(str(p) for p in written.values())}")
    return {"frames": len(images), "out_dir": out_dir, **written}
