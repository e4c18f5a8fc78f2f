"""The renderer interface every backend implements, and what it returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Tuple

from torch import Tensor

from ..errors import ConfigError
from .outputs import DepthArg, check_extra_outputs

if TYPE_CHECKING:  # pragma: no cover
    from ..cameras import Camera
    from ..model.gaussians import GaussianModel

RASTERIZE_MODES = ("classic", "antialiased")


@dataclass(frozen=True)
class RenderScene:
    """The run's scene as training sees it, handed to :meth:`Renderer.setup`.

    Attributes:
        cameras: the training cameras in the training frame (normalised when ``data.normalize``
            is on), each with its intrinsics and image size at ``data.downscale``.
        scene_scale: the cameras' extent in that frame (what densification's thresholds scale with).
    """

    cameras: Tuple["Camera", ...]
    scene_scale: float


@dataclass
class RenderResult:
    """What a renderer returns for a batch of C cameras.

    Attributes:
        rgb: [C, H, W, 3] colours composited over the background.
        alpha: [C, H, W, 1] accumulated opacity.
        depth: [C, H, W, 1] expected depth (accumulated depth / alpha), or None.
        median_depth: [C, H, W, 1] median depth, or None: the depth of the last contributing
            Gaussian in front of which the pixel's transmittance is still above 0.5 (the one at
            which the accumulated opacity first reaches one half; the last contributing one where
            it never does; 0 where none contributes: ``alpha`` tells). Not differentiable.
        normals: [C, H, W, 3] alpha-composited normals of the Gaussians (the axis of each one's
            smallest scale, facing the camera) in the camera frame (OpenCV axes), not
            normalised: sum_i w_i n_i; or None.
        distortion: [C, H, W, 1] the weights' spread along the ray, sum_ij w_i w_j (z_i - z_j)^2 / 2
            over the pixel's composited Gaussians (w the compositing weights, z the depths); or None.
        info: intermediate results shaped like gsplat's ``meta`` dict, which densification
            reads: ``means2d`` [C, N, 2] (its gradient after backward), ``radii`` [C, N, 2]
            (0 for Gaussians that touch no pixel), ``width``, ``height``, ``n_cameras``.
    """

    rgb: Tensor
    alpha: Tensor
    depth: Optional[Tensor] = None
    info: Dict[str, Any] = field(default_factory=dict)
    median_depth: Optional[Tensor] = None
    normals: Optional[Tensor] = None
    distortion: Optional[Tensor] = None

    #: The optional per-pixel images, in the order above (renderers that merge results use it).
    IMAGES = ("depth", "median_depth", "normals", "distortion")


class Renderer(ABC):
    """Renders a GaussianModel from a batch of same-sized cameras (register subclasses with
    ``@RENDERERS.register("name")``; the ``renderer`` config section's keys are the
    constructor's options).

    Lifecycle, in call order: built from the config; ``absgrad`` and :attr:`extra_outputs` set;
    :meth:`setup` with the run's scene and Gaussians (``fit``, and ``eval``, ``render``, ``view``,
    ``export`` for a renderer whose :attr:`needs_scene` is True or that has the scene at hand);
    on resume or in a command, :meth:`load_state_dict` with the checkpoint's state; then
    :meth:`render` for every view, :meth:`gaussians_moved` whenever the strategy (or a hook)
    changes the Gaussians' rows, :meth:`state_dict` at every checkpoint, and
    :meth:`export_gaussians` wherever a scene file is written. Every default does nothing.

    Subclasses implement :meth:`render`; the trainer calls it once per training micro-batch
    (``depth`` True only when a loss term or ``trainer.render_depth`` asks) and once per test
    view at validation (``depth`` True). Every backend returns the same :class:`RenderResult`
    with a gsplat-shaped ``info``, so every densification strategy works with every backend.
    Backends with ``supports_absgrad`` fill ``info["means2d"].absgrad`` when ``absgrad`` is set
    (the trainer sets it when the strategy asks for absolute gradients).

    Args:
        rasterize_mode: ``classic``, or ``antialiased`` (Mip-Splatting's 2D filter with opacity
            compensation).
        tile_size: side of the screen tiles Gaussians are binned into, in pixels.
        near_plane, far_plane: Gaussians outside this depth range are culled.
        eps2d: added to the 2D covariance's diagonal (the low-pass filter).
    """

    supports_absgrad = False
    #: Whether gradients reach ``Camera.viewmat`` (pose refinement needs it).
    supports_pose_grad = False
    #: Which of ``normals`` and ``distortion`` the backend can add to its renders.
    supported_extras: FrozenSet[str] = frozenset()
    #: Whether :meth:`setup` needs the training cameras: the commands then read the run's scene
    #: (and stop in one line naming its folder when it is gone) even where they need no views.
    needs_scene = False

    def __init__(
        self,
        rasterize_mode: str = "classic",
        tile_size: int = 16,
        near_plane: float = 0.01,
        far_plane: float = 1e10,
        eps2d: float = 0.3,
    ) -> None:
        if rasterize_mode not in RASTERIZE_MODES:
            raise ConfigError(f"renderer.rasterize_mode is {rasterize_mode!r}; expected one of {', '.join(RASTERIZE_MODES)}")
        if tile_size < 1:
            raise ConfigError(f"renderer.tile_size must be > 0, got {tile_size}")
        if not 0.0 < near_plane < far_plane:
            raise ConfigError(f"renderer needs 0 < near_plane < far_plane, got {near_plane} and {far_plane}")
        if not eps2d >= 0.0:
            raise ConfigError(f"renderer.eps2d must be >= 0, got {eps2d}")
        self.rasterize_mode = rasterize_mode
        self.tile_size = tile_size
        self.near_plane = near_plane
        self.far_plane = far_plane
        self.eps2d = eps2d
        self.absgrad = False
        self._extra_outputs: FrozenSet[str] = frozenset()

    @property
    def extra_outputs(self) -> FrozenSet[str]:
        """Extra images every render adds (``normals``, ``distortion``): set by the training loss
        from the terms that read them; ValueError for one the backend cannot render."""
        return self._extra_outputs

    @extra_outputs.setter
    def extra_outputs(self, names: Iterable[str]) -> None:
        self._extra_outputs = check_extra_outputs(names, self.supported_extras, type(self).__name__)

    @abstractmethod
    def render(
        self, model: "GaussianModel", cameras: List["Camera"], sh_degree: int, background: Tensor,
        depth: DepthArg = True,
    ) -> RenderResult:
        """Render ``model`` from ``cameras`` using SH up to ``sh_degree`` over ``background`` [3].

        ``depth``: True or ``'expected'`` fills ``RenderResult.depth``; ``'median'`` fills
        ``median_depth`` instead, ``'both'`` both; False neither and skips their work (training
        steps). The images named in :attr:`extra_outputs` are added in any case."""

    def setup(self, scene: RenderScene, model: "GaussianModel") -> None:
        """Called once before the first render, with the run's scene as training sees it and the
        Gaussians (those the run starts with in ``fit``; the checkpoint's in a command)."""

    def gaussians_moved(self, sources: Tensor, params: Mapping[str, Tensor]) -> None:
        """The Gaussians' rows changed (densification, pruning, relocation, a hook's removal):
        ``sources[i]`` is the old row of new row ``i`` (-1: a new Gaussian), ``params`` the new rows."""

    def state_dict(self) -> Dict[str, Any]:
        """What the renderer keeps across a resume (tensors, numbers, strings, dicts of them):
        saved in every checkpoint under ``renderer``; empty by default."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s dict exactly (an empty one from a checkpoint that has
        none); called after :meth:`setup` and after the checkpoint's Gaussians are loaded."""

    def export_gaussians(self, model: "GaussianModel") -> "GaussianModel":
        """The Gaussians a scene file holds: ``model`` with the render-time transform folded in,
        so that a plain renderer draws what :meth:`render` draws (default: ``model`` itself)."""
        return model

    @classmethod
    def folds_into_export(cls) -> bool:
        """Whether :meth:`export_gaussians` changes the Gaussians (it is overridden)."""
        return cls.export_gaussians is not Renderer.export_gaussians

    def training_threads(self) -> AbstractContextManager:
        """The trainer runs training inside this context: a backend that runs threads of its own
        arranges the process's threads for it here (default: changes nothing)."""
        return nullcontext()
