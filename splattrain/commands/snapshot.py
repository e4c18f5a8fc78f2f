"""A trained scene loaded from a checkpoint, with what it needs to render its views."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import torch
from omegaconf import DictConfig, OmegaConf

from ..checkpoint import checkpoint_target, load_checkpoint_file
from ..checkpoint_schema import check_scene
from ..data.loading import load_scene
from ..data.pipeline import DataPipeline
from ..data.types import SceneData
from ..engine.setup import resolve_device
from ..model.gaussians import GaussianModel, degree_for_step
from ..registry import RENDERERS
from ..render import Renderer, build_renderer


@dataclass
class Snapshot:
    """A checkpoint's Gaussians and config, ready to render."""

    path: Path
    checkpoint: Dict[str, Any]
    cfg: DictConfig
    model: GaussianModel
    device: torch.device

    @property
    def step(self) -> int:
        return int(self.checkpoint["step"])

    @property
    def sh_degree(self) -> int:
        """The SH degree the run used at its checkpoint step."""
        return degree_for_step(self.step, self.cfg.model.sh_degree_interval, self.cfg.model.sh_degree)

    @property
    def run_dir(self) -> Path:
        """The run directory the checkpoint belongs to (the folder above ckpt/)."""
        parent = self.path.parent
        return parent.parent if parent.name == "ckpt" else parent

    @property
    def background(self) -> torch.Tensor:
        return torch.tensor(list(self.cfg.data.background), dtype=torch.float32, device=self.device)

    def renderer(self, log: Optional[Callable[[str], None]] = None, warn: Optional[Callable[[str], None]] = None) -> Renderer:
        """The run's renderer on this machine (``auto`` may pick another backend than training did).

        A renderer the run registered through ``imports:`` is not imported from a checkpoint (a
        file never runs code when loaded): the built-in ``auto`` renders instead, after one ``warn``.
        """
        spec = OmegaConf.to_container(self.cfg.renderer, resolve=True)
        kind = str(spec.get("type", "auto"))
        if kind != "auto" and kind not in RENDERERS:
            if warn is not None:
                warn(f"renderer {kind!r} of the run is not registered here (checkpoints never import the run's "
                     "modules); rendering with renderer auto")
            common = ("rasterize_mode", "tile_size", "near_plane", "far_plane", "eps2d")
            spec = {"type": "auto", **{k: v for k, v in spec.items() if k in common}}
        return build_renderer(spec, self.device, log=log, warn=warn)

    def scene(self) -> SceneData:
        """The dataset the run trained on, read again from ``data.path``."""
        return load_scene(self.cfg.data)[1]

    def views(self, split: str = "test", scene: Optional[SceneData] = None) -> DataPipeline:
        """A pipeline whose test batches are the ``split`` ('test' or 'train') views."""
        scene = scene or self.scene()
        frames = scene.test if split == "test" else scene.train
        chosen = SceneData(train=scene.train, test=frames, points=scene.points, point_colors=scene.point_colors,
                           extra=scene.extra)
        return DataPipeline(chosen, self.background, self.device, seed=self.cfg.seed, prefetch=False)


def load_snapshot(target: str | Path, device: str = "auto") -> Snapshot:
    """Load a run directory's newest checkpoint (or a checkpoint file) onto ``device``."""
    path = checkpoint_target(target)
    checkpoint = load_checkpoint_file(path)
    cfg = check_scene(checkpoint, path)
    resolved = resolve_device(device)
    model = GaussianModel(checkpoint["gaussians"], int(checkpoint["sh_degree"])).to(resolved)
    return Snapshot(path=path, checkpoint=checkpoint, cfg=cfg, model=model, device=resolved)
