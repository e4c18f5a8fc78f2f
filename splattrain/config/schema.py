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

#: Field metadata of the step-valued keys: they follow trainer.schedule_steps and steps_scaler
#: (splattrain.steps; the engine scales them).
STEPS = {"steps": "steps"}


@dataclass
class ResolutionConfig:
    """Coarse-to-fine training: the training views shrunk by step (splattrain/engine/resolution.py)."""

    # null: full resolution throughout; [[start_step, factor], ...]; auto: from the images' frequency content
    schedule: Any = None
    until: Optional[int] = field(default=None, metadata=STEPS)  # auto: full resolution from this step (null: half the run)
    max_factor: float = 4.0  # auto: the coarsest factor the run may start at


@dataclass
class TrainerConfig:
    """The training loop."""

    max_steps: int = 7000
    steps_scaler: float = 1.0  # multiplies max_steps and every step-valued setting (gsplat's steps_scaler)
    schedule_steps: Optional[int] = None  # the run length the step settings are written for; they follow max_steps
    val_interval: int = field(default=1000, metadata=STEPS)  # validate every N steps (0: only at the last step)
    val_begin: int = field(default=0, metadata=STEPS)  # no periodic validation before this step
    val_on_resume: bool = False  # validate once right after resuming from a checkpoint
    # auto: time every hook, a table at the end only when hooks took over 5% of the training steps;
    # summary: always that table; off: no timing (true / false from older configs: summary / off)
    hook_timing: str = "auto"
    loss_ema: float = 0.6  # the loss average the log and the viewer show: loss_ema * old + (1 - loss_ema) * new
    batch_size: int = 1  # views rendered together per step (their images must share one size)
    resolution: ResolutionConfig = field(default_factory=ResolutionConfig)  # coarse-to-fine training
    render_depth: bool = False  # training renders also give RenderResult.depth (validation always does)
    type: str = "DefaultTrainer"  # the trainer class (splattrain list trainers)
    rescue_checkpoint: bool = True  # a run that fails saves ckpt/rescue_step_N.pt of its last completed step
    replica_check_interval: int = 1000  # on several ranks: compare the replicas every N steps (and before training and checkpoints; 0: only then)
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    dist_backend: str = "auto"  # under torchrun: auto (nccl on CUDA, else gloo) | gloo | nccl
    dist_threads: int = 0  # under torchrun on the CPU: threads per rank (0: usable cores / ranks on the machine)
    dist_early_bytes: int = 1048576  # under torchrun: SH bands' gradients of at least this size start their all-reduce inside the backward pass (0: always, -1: never)


@dataclass
class DataConfig:
    """Where the posed images come from and how they are prepared."""

    type: str = "auto"  # auto (detected from the folder) | colmap | blender | nerfstudio | a registered reader
    path: str = MISSING
    options: Dict[str, Any] = field(default_factory=dict)  # the reader's own options (splattrain list datasets)
    downscale: float = 1.0  # 2.0 = half resolution; colmap/nerfstudio use images_N/ when N matches
    background: List[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])  # RGBA images go over it
    random_background: bool = False  # training: a random background colour per step (test: `background`)
    test_split: str = "test"  # blender: transforms_{test_split}.json holds the test views
    test_every: int = 8  # colmap/nerfstudio: every N-th image (by name) is a test view; 0: none
    test_images: List[str] = field(default_factory=list)  # colmap/nerfstudio: explicit test image names
    # validation views held out of training: null (validation uses the test views), N >= 2 (every
    # N-th training view) or a fraction in (0, 1); never a test view (docs/datasets.md)
    val_split: Optional[float] = None
    masks: str = "auto"  # auto (masks/ or mask_path when present) | none | a folder of masks
    depths: str = "auto"  # auto (depths/<view>.npy when present) | none | sparse (the SfM points each photo saw) | a folder of <view>.npy
    normalize: Optional[bool] = None  # centre and scale the cameras; null: on for colmap/nerfstudio
    num_workers: int = 0  # image decoding threads; 0: one per CPU core (at most 8)
    image_budget_mb: Optional[float] = None  # decoded images kept in memory (uint8); later ones are decoded when used; null: a quarter of the machine's memory
    prefetch: bool = True  # prepare the next training batch while the current step runs


@dataclass
class InitConfig:
    """How the Gaussians start."""

    type: str = "auto"  # auto (ply if set, points when the scene has them, else random) | points | random
    ply: Optional[str] = None  # start from a scene file: 3DGS PLY (any trainer), compressed PLY, .spz or .splat
    num_points: int = 10_000  # for random init
    extent: float = 1.3  # random init: half side of the cube around the scene centre, world units
    opacity: float = 0.1
    scale_factor: float = 1.0  # initial scale = factor * mean distance to the 3 nearest neighbours


@dataclass
class ModelConfig:
    """The Gaussian scene model."""

    sh_degree: int = 3  # highest spherical-harmonics degree (stored, and reached by the schedule)
    sh_degree_interval: int = field(default=1000, metadata=STEPS)  # raise the active degree by one every N steps (0: max degree from the start)
    init: InitConfig = field(default_factory=InitConfig)


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
    # true: the optimizers step before densification (gsplat's order: refine and reset steps keep
    # their update); false: densification first (the 3DGS order). docs/optimisation.md
    densify_after_step: bool = True


@dataclass
class LossConfig:
    """The training loss: weighted terms (``terms``), or the 3DGS default with ``ssim_lambda``."""

    # [{type: l1, weight: 0.8}, {type: dssim, weight: 0.2}, ...] (splattrain list losses);
    # null: (1 - ssim_lambda) L1 + ssim_lambda D-SSIM plus the strategy's own terms (MCMC's regularisers)
    terms: Optional[List[Any]] = None
    ssim_lambda: Optional[float] = None  # shorthand for the default terms' D-SSIM weight (default 0.2)


@dataclass
class MetricsConfig:
    """Validation metrics."""

    lpips: bool = True  # LPIPS at every validation (docs/metrics.md); null in the results when its weights cannot be had
    lpips_net: str = "alex"  # alex | vgg
    lpips_weights: Optional[str] = None  # folder with the backbone and linear-layer files, looked in first
    lpips_download: bool = True  # fetch missing weight files into torch's hub cache (SHA-256 checked); false: never
    align_poses: int = 0  # N > 0: also aligned_psnr, each test view scored after N steps fitting its pose to the scene


@dataclass
class ExportConfig:
    """Exported scenes (PLY)."""

    world_frame: str = "original"  # original (the dataset's own frame) | normalized (the training frame)


@dataclass
class SplatConfig:
    """The whole run."""

    name: str = MISSING
    output_dir: Optional[str] = None  # default outputs/<name>
    checkpoint_dir: Optional[str] = None  # default <output_dir>/ckpt; elsewhere, it is locked like the run folder
    seed: int = 42
    imports: List[str] = field(default_factory=list)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    # {type: auto | cpu | torch | gsplat | a registered renderer, **its options} (splattrain list renderers):
    # rasterize_mode (classic | antialiased), tile_size, near_plane, far_plane, eps2d; gsplat: packed, sparse_grad
    renderer: Dict[str, Any] = field(default_factory=lambda: {"type": "auto"})
    optim: OptimConfig = field(default_factory=OptimConfig)
    # {type: default | mcmc | a registered strategy, **its options} (splattrain list strategies)
    strategy: Dict[str, Any] = field(default_factory=lambda: {"type": "default"})
    loss: LossConfig = field(default_factory=LossConfig)
    # per-image colour learned with the scene: {type: none | affine, lr, lr_final, weight_decay} (docs/real_captures.md)
    appearance: Dict[str, Any] = field(default_factory=lambda: {"type": "none"})
    # per-view pose correction: {type: none | se3, lr, lr_final, weight_decay, l1}; needs renderer torch or gsplat
    pose_opt: Dict[str, Any] = field(default_factory=lambda: {"type": "none"})
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    writers: List[Any] = field(
        default_factory=lambda: [{"type": "tensorboard"}, {"type": "jsonl"}, {"type": "image"}]
    )
    default_hooks: Dict[str, Any] = field(default_factory=dict)
    custom_hooks: List[Any] = field(default_factory=list)
