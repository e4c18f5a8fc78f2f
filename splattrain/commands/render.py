"""``splattrain render``: frames along the test cameras or an orbit, plus an animation."""

from __future__ import annotations

import importlib.util
import json
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
from ..io.depth_maps import save_depth_maps
from ..io.png import save_png, to_uint8
from .snapshot import load_snapshot


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
    depth: str = "median",
) -> Dict[str, object]:
    """Render PNG frames along ``path`` ('test' cameras or an 'orbit') and an animated GIF (MP4 when
    possible), and with ``depth`` ('median', 'expected'; 'none' for no depth) each frame's depth map
    in ``depth/``: a 16-bit PNG (its scale in the PNG's ``depth_scale`` text and in
    ``depth/depth_scale.json``), float32 ``.npy`` and a coloured ``_preview.png``."""
    if path not in ("test", "orbit"):
        raise UserError(f"--path {path!r}: use 'test' or 'orbit'")
    if depth not in DEPTH_CHOICES:
        raise UserError(f"--depth {depth!r}: use one of {', '.join(DEPTH_CHOICES)}")
    snapshot = load_snapshot(target, device, imports, trust_config)
    out_dir = Path(out) if out is not None else snapshot.run_dir / "renders" / f"{path}_step_{snapshot.step:06d}"
    data = snapshot.scene()
    scene = snapshot.views("test", data)
    cameras = [f.camera for f in scene.test_frames]
    if path == "orbit":
        cameras = orbit_cameras([f.camera for f in scene.train_frames], frames)
    renderer = snapshot.renderer(log=console.info, warn=console.warning, scene=data)
    images: List[np.ndarray] = []
    scales: Dict[str, float] = {}
    with Progress(console=console.terminal, disable=console.quiet) as progress:
        task = progress.add_task(f"rendering {len(cameras)} frames", total=len(cameras))
        for index, camera in enumerate(cameras):
            interrupts.check()
            result = renderer.render(snapshot.model, [camera.to(snapshot.device)], snapshot.sh_degree, snapshot.background,
                                     depth=False if depth == "none" else depth)
            image = to_uint8(result.rgb[0])
            images.append(image)
            save_png(out_dir / "frames" / f"frame_{index:04d}.png", image)
            if depth != "none":
                depth_map = result.median_depth if depth == "median" else result.depth
                if depth_map is None:
                    raise UserError(f"renderer {type(renderer).__name__} rendered no {depth} depth; "
                                    "use --depth expected or none")
                saved = save_depth_maps(out_dir / "depth", f"frame_{index:04d}", depth_map[0, ..., 0].cpu().numpy(),
                                        result.alpha[0, ..., 0].cpu().numpy())
                scales[str(saved["png"])] = float(saved["scale"])  # type: ignore[arg-type]
            progress.advance(task)
    written = _save(images, out_dir, fps)
    if scales:
        with atomic_path(out_dir / "depth" / "depth_scale.json") as tmp:
            tmp.write_text(json.dumps({"depth": depth, "units_per_level": scales}, indent=1) + "\n")
        written["depth"] = out_dir / "depth"
    if "mp4" not in written:
        console.info("MP4 skipped: install imageio and imageio-ffmpeg for video output")
    console.info(f"wrote {len(images)} frames to {out_dir / 'frames'} and {', '.join(str(p) for p in written.values())}")
    return {"frames": len(images), "out_dir": out_dir, **written}
