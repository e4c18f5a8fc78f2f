"""Build a run's components from its config, resolving their dependencies once: the renderer
needs the strategy's ``absgrad``, the strategy checks the renderer, the loss drops terms the data
cannot feed, the view corrections need the renderer and the cameras. The trainer only assembles
what this returns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from omegaconf import DictConfig, OmegaConf

from ..cameras import Camera
from ..data.loading import load_scene
from ..data.locate import resolve_data_path
from ..data.pipeline import DataPipeline, camera_scene_scale, focus_point
from ..data.types import SceneData
from ..distributed import DistContext
from ..errors import ConfigError, DataError
from ..hooks.base import Hook
from ..hooks.specs import build_hook, hook_sections
from ..protocol import RunSchedule
from ..io.gaussians_file import read_gaussians_file
from ..io.limits import require_memory
from ..losses import Loss, build_loss, unlisted_strategy_terms
from ..metrics.pose_alignment import check_alignment
from ..model import init as model_init
from ..model.gaussians import GaussianModel
from ..optim import build_optimizers, build_schedulers
from ..render import build_renderer
from ..render.base import Renderer, RenderScene
from ..strategy import SceneFacts, build_strategy
from ..strategy.protocol import Strategy
from ..view_opt import ViewCorrections
from .batching import views_per_step
from .step_scaling import check_schedule
from .resolution import ResolutionSchedule, build_schedule

Message = Callable[[str], None]


@dataclass
class Components:
    """Everything a run trains with, built and checked against each other."""

    data: DataPipeline
    data_type: str
    scene_scale: float
    model: GaussianModel
    renderer: Renderer
    strategy: Strategy
    loss: Loss
    schedule: RunSchedule
    optimizers: Dict[str, torch.optim.Optimizer]
    schedulers: List[Any]
    strategy_state: Dict[str, Any]
    view_opt: ViewCorrections
    resolution: Optional[ResolutionSchedule] = None  #: coarse-to-fine (None: full resolution throughout)


def plain(node: Any) -> Dict[str, Any]:
    """A config section as a plain dict (resolved)."""
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})


def build_components(cfg: DictConfig, dist: DistContext, background: torch.Tensor, config_dir: Optional[Path],
                     info: Message, warning: Message, scaled: Tuple[str, ...] = ()) -> Components:
    """Load the scene and build the model, renderer, strategy, loss, optimizers and view corrections."""
    device, max_steps = dist.device, int(cfg.trainer.max_steps)
    found, notes = resolve_data_path(cfg.data.path, config_dir)
    if found.exists():  # the run's config.yaml and checkpoints find the data from any directory
        cfg.data.path = str(found.resolve())
    data_type, scene = load_scene(cfg.data, config_dir=config_dir)
    scene.extra["notes"] = notes + list(scene.extra.get("notes", []))
    views = views_per_step(cfg.trainer.batch_size, cfg.optim.accumulate_steps, [f.camera for f in scene.train])
    data = DataPipeline(
        scene, background, device, seed=cfg.seed,
        random_background=cfg.data.random_background, prefetch=cfg.data.prefetch, views=views,
        rank=dist.rank, world_size=dist.world_size,
    )
    scene_scale = camera_scene_scale(data.train_cameras)
    model = initial_model(cfg, scene, data.train_cameras, info).to(device)
    strategy_spec = plain(cfg.strategy)
    renderer = build_renderer(plain(cfg.renderer), device, log=info, warn=warning,
                              absgrad=bool(strategy_spec.get("absgrad", False)))
    check_alignment(renderer, int(cfg.metrics.align_poses))
    strategy = build_strategy(strategy_spec, renderer, warn=warning)
    strategy.fit_to_scene(SceneFacts(
        train_views=len(data.train_cameras), train_pixels=sum(c.width * c.height for c in data.train_cameras),
        initial_gaussians=model.num_gaussians, scene_scale=scene_scale,
    ))
    check_schedule(strategy, max_steps, warning)
    strategy.set_statistics_reducer(dist if dist.enabled else None)
    strategy_terms = strategy.default_loss_terms()
    loss = build_loss(plain(cfg.loss), strategy_terms)
    for line in unlisted_strategy_terms(plain(cfg.loss), strategy_terms):
        warning(line)
    loss.drop_unavailable(_LossContext(cfg, device, data, model, renderer), warning)
    renderer.extra_outputs = loss.needs_outputs  # the images the kept terms read (normals, distortion)
    optimizers = build_optimizers(model, cfg.optim, scene_scale)
    schedulers = build_schedulers(optimizers, cfg.optim, scene_scale, max_steps)
    strategy.check_sanity(model.params, optimizers)
    view_opt = ViewCorrections(
        plain(cfg.appearance), plain(cfg.pose_opt), len(scene.train), device, renderer, max_steps,
        cameras=data.train_cameras, points=model.means.detach(), scene_scale=scene_scale,
    )
    set_up_renderer(renderer, strategy, data.train_cameras, model)
    return Components(
        data=data, data_type=data_type, scene_scale=scene_scale, model=model, renderer=renderer,
        strategy=strategy, loss=loss,
        schedule=run_schedule(cfg, views, loss.needs_depth, scaled, densification_end(strategy, max_steps)),
        optimizers=optimizers, schedulers=schedulers,
        strategy_state=strategy.initialize_state(scene_scale=scene_scale), view_opt=view_opt,
        resolution=build_schedule(cfg.trainer.resolution, max_steps, scene.train, list(cfg.data.background)),
    )


def render_scene(cameras: List[Camera]) -> RenderScene:
    """What :meth:`Renderer.setup` is given: the training cameras (in the training frame) and their
    extent, the same in ``fit`` and in every command that renders."""
    return RenderScene(cameras=tuple(cameras), scene_scale=camera_scene_scale(cameras))


def set_up_renderer(renderer: Renderer, strategy: Strategy, cameras: List[Camera], model: GaussianModel) -> None:
    """The renderer's lifecycle in ``fit``: :meth:`~Renderer.setup` with the run's scene and the
    starting Gaussians; then it hears of every change of their rows (``gaussians_moved``)."""
    renderer.setup(render_scene(cameras), model)
    strategy.add_reindex_listener(renderer.gaussians_moved)


def initial_model(cfg: DictConfig, scene: SceneData, cameras: List[Camera], info: Message) -> GaussianModel:
    """The Gaussians ``model.init`` asks for (:mod:`splattrain.model.init`): a scene file, the sparse
    points, or random points; a start that cannot fit in memory is refused in one line."""
    init, degree = cfg.model.init, int(cfg.model.sh_degree)
    if init.ply is not None:
        params, file_degree = read_gaussians_file(init.ply)
        model = model_init.from_file(init, params, file_degree, degree)
        info(f"initialised {model.num_gaussians} Gaussians from {init.ply}")
        return model
    points = model_init.uses_points(init, scene.points, cfg.data.path)
    count = len(scene.points) if points else int(init.num_points)
    what = f"the {count} sparse points of {cfg.data.path}" if points else f"model.init.num_points={count}"
    try:
        require_memory(what, model_init.start_memory_bytes(count, degree))
    except DataError as err:
        raise ConfigError(str(err)) from None
    if points:
        return model_init.from_points(init, degree, scene.points, scene.point_colors, cfg.seed)
    return model_init.random_gaussians(init, degree, focus_point(cameras), cfg.seed)


@dataclass
class _LossContext:
    """What a loss term's ``unavailable`` may read of the run being built."""

    cfg: DictConfig
    device: torch.device
    data: DataPipeline
    model: GaussianModel
    renderer: Renderer


def densification_end(strategy: Strategy, max_steps: int) -> Optional[int]:
    """The step at which ``strategy`` stops refining the scene: its ``refine_stop_iter`` when it
    has one, else the step after its last scheduled refinement; None when it does not say."""
    stop = getattr(strategy, "refine_stop_iter", None)
    if isinstance(stop, int) and not isinstance(stop, bool):
        return min(stop, max_steps)
    refines = strategy.events(max_steps).get("refine")
    return min(refines[-1] + 1, max_steps) if refines else None


def run_schedule(cfg: DictConfig, views: int, loss_needs_depth: bool = False, scaled: Tuple[str, ...] = (),
                 densification_ends: Optional[int] = None) -> RunSchedule:
    """The step settings of ``cfg`` (already scaled) every step reads, taken once (each OmegaConf
    lookup costs tens of microseconds)."""
    trainer, model = cfg.trainer, cfg.model
    return RunSchedule(
        max_steps=int(trainer.max_steps), batch_size=int(trainer.batch_size), views_per_step=views,
        val_interval=int(trainer.val_interval), val_begin=int(trainer.val_begin),
        sh_degree=int(model.sh_degree), sh_degree_interval=int(model.sh_degree_interval),
        render_depth=bool(trainer.render_depth) or loss_needs_depth, scaled=tuple(scaled),
        densification_ends=densification_ends,
    )


def build_hooks(cfg: DictConfig) -> List[Hook]:
    """The config's default and custom hooks, built in order."""
    sections = hook_sections(plain(cfg.default_hooks), [plain(s) for s in cfg.custom_hooks])
    return [build_hook(name, spec, where) for name, spec, where in sections]
