"""Typed config schema (OmegaConf structured configs over dataclasses).

Every key a config file or a ``dotted.key=value`` override may set is declared here,
with its type and default. Sections: ``trainer``, ``data``, ``model``, ``renderer``,
``optim``, ``strategy``, ``loss``, ``metrics``, ``writers``, ``default_hooks``,
``custom_hooks``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING


@dataclass
class TrainerConfig:
    """The training loop."""

    max_steps: int = 7000
    val_interval: int = 1000  # validate every N steps (0: only at the last step)
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps


@dataclass
class DataConfig:
    """Where the posed images come from and how they are prepared."""

    type: str = "auto"  # auto | blender
    path: str = MISSING
    downscale: float = 1.0  # 2.0 = half resolution
    background: List[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])
    test_split: str = "test"


@dataclass
class InitConfig:
    """How the Gaussians start."""

    type: str = "auto"  # auto (points when the scene has them, else random) | points | random
    num_points: int = 10_000  # for random init
    extent: float = 1.3  # random init: half side of the cube around the scene centre, world units
    opacity: float = 0.1
    scale_factor: float = 1.0  # initial scale = factor * mean distance to the 3 nearest neighbours


@dataclass
class ModelConfig:
    """The Gaussian scene model."""

    sh_degree: int = 3  # highest spherical-harmonics degree
    sh_degree_interval: int = 1000  # raise the active degree every N steps
    init: InitConfig = field(default_factory=InitConfig)


@dataclass
class RendererConfig:
    """Rasterization backend and its settings."""

    type: str = "auto"  # auto | gsplat | torch
    rasterize_mode: str = "classic"  # classic | antialiased
    tile_size: int = 16
    near_plane: float = 0.01
    far_plane: float = 1e10
    eps2d: float = 0.3


@dataclass
class OptimConfig:
    """Adam learning rates per parameter group (3DGS defaults)."""

    means_lr: float = 1.6e-4  # scaled by the scene scale
    means_lr_final: float = 1.6e-6  # reached at the last step (exponential decay)
    scales_lr: float = 5e-3
    quats_lr: float = 1e-3
    opacities_lr: float = 5e-2
    sh0_lr: float = 2.5e-3
    shN_lr: float = 2.5e-3 / 20
    eps: float = 1e-15


@dataclass
class StrategyConfig:
    """Densification (gsplat's DefaultStrategy options)."""

    type: str = "default"
    prune_opa: float = 0.005
    grow_grad2d: float = 0.0002
    grow_scale3d: float = 0.01
    grow_scale2d: float = 0.05
    prune_scale3d: float = 0.1
    prune_scale2d: float = 0.15
    refine_scale2d_stop_iter: int = 0
    refine_start_iter: int = 500
    refine_stop_iter: int = 15_000
    reset_every: int = 3000
    refine_every: int = 100
    pause_refine_after_reset: int = 0
    absgrad: bool = False
    revised_opacity: bool = False


@dataclass
class LossConfig:
    """Photometric loss: (1 - lambda) * L1 + lambda * D-SSIM."""

    ssim_lambda: float = 0.2


@dataclass
class MetricsConfig:
    """Validation metrics."""

    lpips: bool = True  # computed when the lpips package and its weights are available
    lpips_net: str = "alex"  # alex | vgg | squeeze


@dataclass
class SplatConfig:
    """The whole run."""

    name: str = MISSING
    output_dir: Optional[str] = None  # default outputs/<name>
    seed: int = 42
    imports: List[str] = field(default_factory=list)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    renderer: RendererConfig = field(default_factory=RendererConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    writers: List[Any] = field(
        default_factory=lambda: [{"type": "tensorboard"}, {"type": "jsonl"}, {"type": "image"}]
    )
    default_hooks: Dict[str, Any] = field(default_factory=dict)
    custom_hooks: List[Any] = field(default_factory=list)
