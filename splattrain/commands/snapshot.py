"""A trained scene loaded from a checkpoint, with what it needs to render its views."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch
import yaml
from omegaconf import DictConfig, OmegaConf

from ..checkpoints.files import checkpoint_target, load_checkpoint_file
from ..checkpoints.renderer_state import restore_renderer
from ..checkpoints.schema import check_scene
from ..config.imports import import_user_modules
from ..data.loading import load_scene
from ..data.pipeline import DataPipeline
from ..data.types import SceneData
from ..engine.build import render_scene
from ..engine.setup import resolve_device
from ..model.gaussians import GaussianModel, degree_for_step
from ..errors import UserError
from ..registry import DATASETS, RENDERERS
from ..render import Renderer, build_renderer


class RunPluginError(UserError):
    """The run used a plugin (renderer, dataset) that is not registered in this process."""


def missing_plugin(what: str, kind: str, cfg: DictConfig) -> RunPluginError:
    """The one-line error for a plugin of the run that is not registered here."""
    imports = ", ".join(map(str, cfg.imports)) or "none"
    return RunPluginError(
        f"the run's {what} {kind!r} is not registered here (a checkpoint never runs code): pass "
        f"--import PATH_OR_MODULE naming the module that registers it, or --trust-config to import "
        f"what the run's config names in imports: ({imports})"
    )


@dataclass
class Snapshot:
    """A checkpoint's Gaussians and config, ready to render."""

    path: Path
    checkpoint: Dict[str, Any]
    cfg: DictConfig
    model: GaussianModel
    device: torch.device
    run_dir: Path  #: the run folder: the target when it is a folder, else the one above ckpt/ (or the file's)

    @property
    def step(self) -> int:
        return int(self.checkpoint["step"])

    @property
    def sh_degree(self) -> int:
        """The SH degree the run used at its checkpoint step."""
        return degree_for_step(self.step, self.cfg.model.sh_degree_interval, self.cfg.model.sh_degree)

    @property
    def background(self) -> torch.Tensor:
        return torch.tensor(list(self.cfg.data.background), dtype=torch.float32, device=self.device)

    def renderer(self, log: Optional[Callable[[str], None]] = None, warn: Optional[Callable[[str], None]] = None,
                 scene: Optional[SceneData] = None) -> Renderer:
        """The run's renderer on this machine (``auto`` may pick another backend than training did),
        set up as in ``fit``: with the run's training cameras (``scene``, else read again when the
        renderer ``needs_scene``) and the Gaussians, then given the checkpoint's renderer state.

        A renderer the run registered through ``imports:`` must be registered here (``--import``
        or ``--trust-config``): :class:`RunPluginError` otherwise, never another renderer.
        """
        spec = OmegaConf.to_container(self.cfg.renderer, resolve=True)
        kind = str(spec.get("type", "auto"))
        if kind != "auto" and kind not in RENDERERS:
            raise missing_plugin("renderer", kind, self.cfg)
        renderer = build_renderer(spec, self.device, log=log, warn=warn)
        if scene is None and renderer.needs_scene:
            scene = self._scene_for(renderer)
        if scene is not None:
            self._check_frame(scene, warn)
            renderer.setup(render_scene([frame.camera for frame in scene.train]), self.model)
        restore_renderer(renderer, self.checkpoint, self.path)
        return renderer

    @torch.no_grad()
    def exported_scene(self, log: Optional[Callable[[str], None]] = None,
                       warn: Optional[Callable[[str], None]] = None) -> Tuple[GaussianModel, bool]:
        """The Gaussians a scene file of the run holds, the renderer's render-time transform folded
        in (``Renderer.export_gaussians``), and whether they are drawn antialiased. A renderer that
        folds nothing is not built: its plugin is needed only when it folds (the checkpoint says
        so, or it is registered here and does)."""
        kind = str(OmegaConf.select(self.cfg, "renderer.type", default="auto"))
        if kind in RENDERERS:
            folds = RENDERERS.get(kind).folds_into_export()
        else:  # auto picks a built-in, which folds nothing; a plugin not registered here: as it said
            folds = kind != "auto" and bool((self.checkpoint.get("renderer") or {}).get("folds_into_export"))
        if not folds:
            mode = OmegaConf.select(self.cfg, "renderer.rasterize_mode", default="classic")
            return self.model, mode == "antialiased"
        renderer = self.renderer(log=log, warn=warn)
        return renderer.export_gaussians(self.model), renderer.rasterize_mode == "antialiased"

    def _scene_for(self, renderer: Renderer) -> SceneData:
        """The run's scene for a renderer that sets itself up with the training cameras; one line
        naming the scene's folder when it cannot be read."""
        try:
            return self.scene()
        except RunPluginError:
            raise
        except UserError as err:
            raise UserError(f"renderer {type(renderer).__name__} needs the run's training cameras, but its scene "
                            f"'{self.cfg.data.path}' cannot be read ({err})") from None

    def _check_frame(self, scene: SceneData, warn: Optional[Callable[[str], None]]) -> None:
        """Warn when the scene read now is normalised otherwise than the run's (its cameras changed)."""
        saved = self.checkpoint.get("world_transform")
        now = torch.as_tensor(scene.extra.get("world_transform"), dtype=torch.float64)
        if warn is not None and saved is not None and not torch.allclose(now, saved.double(), rtol=1e-6, atol=1e-9):
            warn(f"the scene '{self.cfg.data.path}' is normalised otherwise than when the run trained on it "
                 "(its cameras changed): the renderer is set up with its cameras as they are now")

    def scene(self) -> SceneData:
        """The dataset the run trained on, read again from ``data.path`` by the run's reader
        (:class:`RunPluginError` when it is not registered here)."""
        kind = str(self.cfg.data.type)
        if kind != "auto" and kind not in DATASETS:
            raise missing_plugin("dataset reader", kind, self.cfg)
        return load_scene(self.cfg.data)[1]

    def views(self, split: str = "test", scene: Optional[SceneData] = None) -> DataPipeline:
        """A pipeline whose test batches are the ``split`` ('test' or 'train') views."""
        scene = scene or self.scene()
        frames = scene.test if split == "test" else scene.train
        chosen = SceneData(train=scene.train, test=frames, points=scene.points, point_colors=scene.point_colors,
                           extra=scene.extra)
        return DataPipeline(chosen, self.background, self.device, seed=self.cfg.seed, prefetch=False)


def load_snapshot(target: str | Path, device: str = "auto", imports: Sequence[str] = (),
                  trust_config: bool = False) -> Snapshot:
    """Load a run directory's newest checkpoint (or a checkpoint file) onto ``device``.

    ``imports`` (paths or module names) are imported first; ``trust_config`` also imports what the
    run's config names in ``imports:`` (its code runs: only for runs one trusts)."""
    run_dir = Path(target)
    path = checkpoint_target(run_dir, run_checkpoint_dir(run_dir) if run_dir.is_dir() else None)
    checkpoint = load_checkpoint_file(path)
    cfg = check_scene(checkpoint, path)
    import_user_modules(list(imports))
    if not run_dir.is_dir():
        run_dir = path.parent.parent if path.parent.name == "ckpt" else path.parent
    if trust_config:
        import_user_modules(list(cfg.imports), run_dir)
    if cfg.data.type == "auto" and checkpoint.get("data_type"):  # the reader the run's auto-detection chose
        cfg.data.type = str(checkpoint["data_type"])
    resolved = resolve_device(device)
    model = GaussianModel(checkpoint["gaussians"], int(checkpoint["sh_degree"])).to(resolved)
    return Snapshot(path=path, checkpoint=checkpoint, cfg=cfg, model=model, device=resolved, run_dir=run_dir)


#: The largest run config.yaml read to find the run's checkpoint folder.
MAX_RUN_CONFIG_BYTES = 1 << 20


def run_checkpoint_dir(run_dir: Path) -> Path:
    """Where the run in ``run_dir`` keeps its checkpoints: the ``checkpoint_dir`` its config.yaml
    names (a relative one from the folder the run was started in, which its ``output_dir`` tells,
    else from the current folder), or ``ckpt/``."""
    config, default = run_dir / "config.yaml", run_dir / "ckpt"
    try:
        if config.is_symlink() or not config.is_file() or config.stat().st_size > MAX_RUN_CONFIG_BYTES:
            return default
        data = yaml.safe_load(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return default  # not a config splattrain wrote: the checkpoint is looked for in ckpt/
    folder = data.get("checkpoint_dir") if isinstance(data, dict) else None
    if not isinstance(folder, str) or not folder.strip():
        return default
    if Path(folder).is_absolute():
        return Path(folder)
    output_dir = data.get("output_dir")
    parts = Path(output_dir).parts if isinstance(output_dir, str) and not Path(output_dir).is_absolute() else ()
    resolved = run_dir.resolve().parts
    if parts and ".." not in parts and resolved[-len(parts):] == parts:
        started_in = Path(*resolved[: -len(parts)])
        if (started_in / folder).is_dir():
            return started_in / folder
    return Path(folder)
