"""What the viewer page shows of a scene: its cameras as frustums and the stats panel."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..data.types import Frame
from .images import thumbnail
from .server import CameraGroup, ViewerServer

TRAIN_COLOR = (40, 90, 200)
TEST_COLOR = (220, 80, 40)
MAX_THUMBNAILS = 300  # more training views are drawn as plain frustums (thumbnails cost start-up time)


def add_scene_cameras(server: ViewerServer, train: Sequence[Frame], test: Sequence[Frame], scene_scale: float,
                      thumbnails: bool = True, background: Sequence[float] = (1.0, 1.0, 1.0)) -> None:
    """Train (blue, with their images as thumbnails up to MAX_THUMBNAILS views) and test (orange) cameras as frustums;
    browsers start at the first train camera (else the first test camera)."""
    scale = 0.05 * max(scene_scale, 1e-6)
    thumbnails = thumbnails and len(train) <= MAX_THUMBNAILS
    for name, frames, color in (("train", train, TRAIN_COLOR), ("test", test, TEST_COLOR)):
        if not frames:
            continue
        images = [thumbnail(f.pixels(), background) for f in frames] if thumbnails and name == "train" else None
        server.add_cameras(CameraGroup(name, [f.camera for f in frames], images, color), scale)
    server.set_initial_cameras([f.camera for f in (train or test)])


def stats_markdown(status: Mapping[str, Any], state: str) -> str:
    """The stats panel: step, state, Gaussians, EMA loss, last PSNR, steps per second."""
    loss = status.get("ema_loss")
    psnr = status.get("psnr")
    lines = [
        f"**step {status['step']} / {status['max_steps']}** ({state})",
        f"Gaussians {status['gaussians']:,}",
        "loss (EMA) " + ("-" if loss is None else f"{loss:.4f}"),
        "last PSNR " + ("-" if psnr is None else f"{psnr:.2f} dB"),
        f"{status['steps_per_second']:.1f} steps/s",
    ]
    return "  \n".join(lines)


def scene_markdown(name: str, num_gaussians: int, step: int | None) -> str:
    """The panel of a finished scene."""
    lines = [f"**{name}**", f"Gaussians {num_gaussians:,}"]
    if step is not None:
        lines.append(f"step {step}")
    return "  \n".join(lines)
