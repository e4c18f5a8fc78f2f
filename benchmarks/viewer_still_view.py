"""How often a still view of a training run changes visibly: what the viewer's refresh sends.

Trains the demo scene (configs/demo.yaml, no validation, checkpoints or writers) and every
``--every`` steps renders the browser's starting view (behind the first training camera, 512
pixels on the long side), as the viewer refreshes a still view; it counts how many of these
refreshes the viewer would send (the image changed visibly since the last one sent, see
``splattrain.viewer.images.visibly_changed``) in each tenth of the run. Deterministic.

    python benchmarks/viewer_still_view.py [--every 100] [option=value ...]

Options are config overrides (``trainer.max_steps=6000``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch

from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from splattrain.hooks import Hook
from splattrain.viewer.camera import overview_pose, pose_to_camera
from splattrain.viewer.images import view_image, visibly_changed

REPO = Path(__file__).resolve().parents[1]


class StillView(Hook):
    """Renders a fixed view every ``every`` steps; records the steps whose image would be sent."""

    def __init__(self, every: int, resolution: int = 512) -> None:
        super().__init__()
        self.every, self.resolution = every, resolution
        self.shown: Optional[np.ndarray] = None
        self.checked: List[int] = []
        self.sent: List[int] = []

    def after_train_iter(self, trainer, step, batch, outputs):
        if step % self.every:
            return
        camera = pose_to_camera(overview_pose(trainer.data.train_cameras), self.resolution)
        with torch.no_grad():
            image = view_image(trainer.renderer.render(trainer.model, [camera], outputs["sh_degree"],
                                                       trainer.background), "rgb")
        self.checked.append(step)
        if visibly_changed(self.shown, image):
            self.shown = image
            self.sent.append(step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", type=int, default=100, help="steps between refreshes")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    overrides = ["trainer.val_interval=0", "writers=[]", "default_hooks.checkpoint=null", "metrics.lpips=false",
                 f"output_dir={tempfile.mkdtemp(prefix='splattrain-still-view-')}"] + args.overrides
    trainer = DefaultTrainer(load_config(REPO / "configs" / "demo.yaml", overrides), console=Console(quiet=True))
    probe = StillView(args.every)
    trainer.register_hook(probe)
    trainer.train()
    steps = trainer.max_steps
    print(f"demo scene, {steps} steps, a still view refreshed every {args.every} steps: "
          f"{len(probe.sent)} of {len(probe.checked)} refreshes changed visibly")
    for tenth in range(10):
        low, high = tenth * steps // 10, (tenth + 1) * steps // 10
        checked = sum(low < s <= high for s in probe.checked)
        sent = sum(low < s <= high for s in probe.sent)
        print(f"  steps {low + 1:6d}-{high:6d}: {sent:3d} of {checked:3d} sent")


if __name__ == "__main__":
    main()
