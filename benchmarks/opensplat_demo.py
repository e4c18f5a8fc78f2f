"""OpenSplat (a built CPU binary) on the demo scene, scored on the demo's test views as splattrain scores itself.

Used by ``bench_time_to_quality.py --opensplat BINARY``. OpenSplat reads nerfstudio projects, so
the demo's training views are written as one: its RGBA images composited on the demo's white
background (the targets splattrain trains on), a ``transforms.json`` with the same poses and
focal length, and 5,000 random starting points in the demo's init extent (``configs/demo.yaml``:
``model.init``). OpenSplat trains 2000 steps with the demo's SH schedule (``--sh-degree-interval
500``) and its own defaults otherwise, keeping the input's coordinates (``--keep-crs``); by
default at full resolution (``--num-downscales 0``) as splattrain trains, since OpenSplat's own
default trains a 2000-step run at a quarter of the resolution throughout. Its ``splat.ply`` is
then rendered by splattrain's renderer on the test views with OpenSplat's background colour
(nerfstudio's default) and scored by splattrain's metrics.

OpenSplat 1.1.5's CPU rasterizer orders the Gaussians by a strided view of their depths read as
if it were contiguous, so it composites them in an order unrelated to depth; the scenes it trains
fit that order and score about 10 dB in any renderer that sorts by depth (docs/benchmarks.md).
A build with that one read made contiguous trains scenes that score as they should.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path
from typing import Dict

import numpy as np
import torch
from PIL import Image

from splattrain.commands.snapshot import Snapshot
from splattrain.engine import load_config
from splattrain.io.gaussians_file import read_gaussians_file
from splattrain.metrics import Evaluator, mean_metrics
from splattrain.model.gaussians import GaussianModel

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo"
OPENSPLAT_BACKGROUND = (0.6130, 0.0101, 0.3984)  # OpenSplat's model.hpp: nerfstudio's default
STEPS = 2000


def write_project(folder: Path, points: int = 5000, seed: int = 42) -> Path:
    """The demo's training views as a nerfstudio project OpenSplat reads; returns the folder."""
    meta = json.loads((DEMO / "transforms_train.json").read_text())
    cfg = load_config(REPO / "configs" / "demo.yaml")
    (folder / "images").mkdir(parents=True, exist_ok=True)
    frames = []
    for frame in meta["frames"]:
        source = DEMO / (frame["file_path"].removeprefix("./") + ".png")
        rgba = np.asarray(Image.open(source).convert("RGBA"), dtype=np.float32) / 255.0
        rgb = rgba[..., :3] * rgba[..., 3:] + (1.0 - rgba[..., 3:])  # on the demo's white background
        name = f"images/{source.stem}.png"
        Image.fromarray(np.round(rgb * 255).astype(np.uint8)).save(folder / name)
        frames.append({"file_path": name, "transform_matrix": frame["transform_matrix"]})
    height, width = rgba.shape[:2]
    focal = 0.5 * width / math.tan(0.5 * float(meta["camera_angle_x"]))
    rng = np.random.default_rng(seed)
    extent = float(cfg.model.init.extent)
    xyz = rng.uniform(-extent, extent, size=(points, 3)).astype(np.float32)
    rgb8 = rng.integers(0, 256, size=(points, 3), dtype=np.uint8)
    lines = [f"{x:.6f} {y:.6f} {z:.6f} {r} {g} {b}" for (x, y, z), (r, g, b) in zip(xyz, rgb8)]
    header = ["ply", "format ascii 1.0", f"element vertex {points}", "property float x", "property float y",
              "property float z", "property uchar red", "property uchar green", "property uchar blue", "end_header"]
    (folder / "points.ply").write_text("\n".join(header + lines) + "\n")
    transforms = {"camera_model": "OPENCV", "w": width, "h": height, "fl_x": focal, "fl_y": focal,
                  "cx": width / 2, "cy": height / 2, "ply_file_path": "points.ply", "frames": frames}
    (folder / "transforms.json").write_text(json.dumps(transforms, indent=1))
    return folder


def train(binary: Path, project: Path, out: Path, downscales: int = 0) -> float:
    """One 2000-step OpenSplat run (``downscales``: its ``--num-downscales``); its wall seconds."""
    command = [str(binary), str(project), "-n", str(STEPS), "-o", str(out / "splat.ply"), "--keep-crs",
               "--sh-degree-interval", "500", "--num-downscales", str(downscales)]
    started = time.perf_counter()
    subprocess.run(command, cwd=out, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


@torch.no_grad()
def score(ply: Path) -> Dict[str, float]:
    """Test-view PSNR / SSIM of an OpenSplat ``splat.ply``, rendered by splattrain; and its Gaussians."""
    cfg = load_config(REPO / "configs" / "demo.yaml", [f"data.path={DEMO}", "metrics.lpips=false"])
    params, degree = read_gaussians_file(ply)
    device = torch.device("cpu")
    snapshot = Snapshot(path=ply, checkpoint={"step": STEPS}, cfg=cfg, model=GaussianModel(params, degree),
                        device=device)
    renderer = snapshot.renderer()
    evaluator = Evaluator(False, cfg.metrics.lpips_net, device, lambda message: None)
    background = torch.tensor(OPENSPLAT_BACKGROUND)
    per_view = [evaluator(renderer.render(snapshot.model, batch["camera"], degree, background).rgb, batch["image"])
                for batch in snapshot.views("test").test_batches()]
    metrics = mean_metrics(per_view)
    return {"psnr": metrics["psnr"], "ssim": metrics["ssim"], "gaussians": int(params["means"].shape[0])}
