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
    val_begin: int = 0  # no periodic validation before this step
    val_on_resume: bool = False  # validate once right after resuming from a checkpoint
    hook_timing: bool = True  # time every hook at every point; a table at the end of the run
    batch_size: int = 1  # views rendered together per step (their images must share one size)
    render_depth: bool = False  # training renders also give RenderResult.depth (validation always does)
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps


@dataclass
class DataConfig:
    """Where the posed images come from and how they are prepared."""

    type: str = "auto"  # auto (detected from the folder) | colmap | blender | nerfstudio
    path: str = MISSING
    downscale: float = 1.0  # 2.0 = half resolution; colmap/nerfstudio use images_N/ when N matches
    background: List[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])  # RGBA images go over it
    random_background: bool = False  # training: a random background colour per step (test: `background`)
    test_split: str = "test"  # blender: transforms_{test_split}.json holds the test views
    test_every: int = 8  # colmap/nerfstudio: every N-th image (by name) is a test view; 0: none
    test_images: List[str] = field(default_factory=list)  # colmap/nerfstudio: explicit test image names
    masks: str = "auto"  # auto (masks/ or mask_path when present) | none | a folder of masks
    normalize: Optional[bool] = None  # centre and scale the cameras; null: on for colmap/nerfstudio
    num_workers: int = 0  # image decoding threads; 0: one per CPU core (at most 8)
    prefetch: bool = True  # prepare the next training batch while the current step runs


@dataclass
class InitConfig:
    """How the Gaussians start."""

    type: str = "auto"  # auto (ply if set, points when the scene has them, else random) | points | random
    ply: Optional[str] = None  # start from a 3DGS PLY (splattrain's or the original code's)
    num_points: int = 10_000  # for random init
    extent: float = 1.3  # random init: half side of the cube around the scene centre, world units
    opacity: float = 0.1
    scale_factor: float = 1.0  # initial scale = factor * mean distance to the 3 nearest neighbours


@dataclass
class ModelConfig:
    """The Gaussian scene model."""

    sh_degree: int = 3  # highest spherical-harmonics degree (stored, and reached by the schedule)
    sh_degree_interval: int = 1000  # raise the active degree by one every N steps (0: max degree from the start)
    init: InitConfig = field(default_factory=InitConfig)


@dataclass
class RendererConfig:
    """Rasterization backend and its settings."""

    type: str = "auto"  # auto (gsplat on CUDA, else cpu, else torch) | gsplat | cpu | torch
    rasterize_mode: str = "classic"  # classic | antialiased
    tile_size: int = 16
    near_plane: float = 0.01
    far_plane: float = 1e10
    eps2d: float = 0.3


@dataclass
class OptimConfig:
    """Adam learning rates per parameter group (3DGS defaults), their schedules, accumulation."""

    means_lr: float = 1.6e-4  # scaled by the scene scale
    means_lr_final: float = 1.6e-6  # reached at the last step (the default exponential means schedule)
    scales_lr: float = 5e-3
    quats_lr: float = 1e-3
    opacities_lr: float = 5e-2
    sh0_lr: float = 2.5e-3
    shN_lr: float = 2.5e-3 / 20
    eps: float = 1e-15
    # group -> {type: fixed|step|exp|poly|inv|cosine|flat-cosine|cosine-restart|cyclic|one-cycle, ...};
    # see docs/optimisation.md. Unnamed groups are fixed, means defaults to the 3DGS decay.
    schedules: Dict[str, Any] = field(default_factory=dict)
    accumulate_steps: int = 1  # micro-batches of trainer.batch_size views whose gradients make one step
    fused: str = "auto"  # auto | true | false: Adam stepped by the compiled CPU library (docs/optimisation.md)
    sparse: bool = False  # update only the Gaussians seen in the step (visible-only Adam)


@dataclass
class StrategyConfig:
    """Densification: gsplat's DefaultStrategy (clone / split / prune) or MCMC."""

    type: str = "default"  # default | mcmc
    max_gaussians: int = 0  # cap on the number of Gaussians (0: none; mcmc needs one)
    prune_opa: float = 0.005  # default: prune below this opacity; mcmc: relocate Gaussians below it
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
    noise_lr: float = 5e5  # mcmc: position noise, times the current means learning rate
    opacity_reg: float = 0.01  # mcmc: weight of the mean opacity added to the loss
    scale_reg: float = 0.01  # mcmc: weight of the mean scale added to the loss


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
class ExportConfig:
    """Exported scenes (PLY)."""

    world_frame: str = "original"  # original (the dataset's own frame) | normalized (the training frame)


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
    export: ExportConfig = field(default_factory=ExportConfig)
    writers: List[Any] = field(
        default_factory=lambda: [{"type": "tensorboard"}, {"type": "jsonl"}, {"type": "image"}]
    )
    default_hooks: Dict[str, Any] = field(default_factory=dict)
    custom_hooks: List[Any] = field(default_factory=list)
