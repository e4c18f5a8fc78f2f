"""The compiled CPU backend (``renderer.type: cpu``), and what ``auto`` picks on the CPU."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

from ..cameras import Camera, stack_cameras
from ..errors import ConfigError
from ..model.gaussians import GaussianModel
from ..registry import RENDERERS
from .base import Renderer, RenderResult
from ..kernels import BuildError, load_library
from ..kernels.threads import cores_for_the_library
from .cpu_rasterizer import composite, project, sh_colors
from .outputs import EXTRA_OUTPUTS, DepthArg, Wanted, extra_features, result_fields
from .pose_grad import merge_results, moved_gaussians
from .projection import Projection

Message = Optional[Callable[[str], None]]
#: The widest channel count the compiled compositing has vector kernels for (besides 3 and 4).
KERNEL_CHANNELS = 8


@RENDERERS.register("cpu", aliases=("CpuRenderer",))
class CpuRenderer(Renderer):
    """Compiled C++ rasterizer for the CPU, all cores (built on first use; needs a C++ compiler)."""

    supports_absgrad = True
    supports_pose_grad = True  # through the Gaussians: see render/pose_grad.py
    supported_extras = frozenset(EXTRA_OUTPUTS)

    def training_threads(self) -> AbstractContextManager:
        """The library's loops get the process's threads and PyTorch's own operations one (see
        ``cpu/threads.py``)."""
        return cores_for_the_library()

    def render(
        self, model: GaussianModel, cameras: List[Camera], sh_degree: int, background: Tensor, depth: DepthArg = True
    ) -> RenderResult:
        viewmats, Ks, width, height = stack_cameras(cameras)
        wanted = Wanted.of(depth, self.extra_outputs)
        scales = model.scales  # one exp a render, shared by the projection and the normals
        if not viewmats.requires_grad:
            proj, features = self._project(model, model.means, model.quats, scales, viewmats, Ks, width, height,
                                           sh_degree)
            return self._composite(proj, features, width, height, background, wanted,
                                   (model.means, model.quats, scales, viewmats), (proj.means2d, 0))
        # Learned camera poses: each camera sees the Gaussians moved by its (zero-valued) motion.
        projected = []
        for k in range(viewmats.shape[0]):
            means, quats, colour_means = moved_gaussians(model.means, model.quats, viewmats[k])
            projected.append(self._project(model, means, quats, scales, viewmats[k:k + 1].detach(), Ks[k:k + 1], width,
                                           height, sh_degree, colour_means))
        # One [C,N,2] means2d on the path to the images, so densification reads its gradient.
        means2d = torch.cat([proj.means2d for proj, _ in projected])
        results = [self._composite(replace(proj, means2d=means2d[k:k + 1]), features, width, height, background, wanted,
                                   (model.means, model.quats, scales, viewmats[k:k + 1]), (means2d, k))
                   for k, (proj, features) in enumerate(projected)]
        merged = merge_results(results)
        merged.info["means2d"] = means2d
        return merged

    def _project(self, model: GaussianModel, means: Tensor, quats: Tensor, scales: Tensor, viewmats: Tensor,
                 Ks: Tensor, width: int, height: int, sh_degree: int,
                 colour_means: Optional[Tensor] = None) -> Tuple[Projection, Tensor]:
        proj = project(
            means, quats, scales, model.opacities, viewmats, Ks, width, height,
            near_plane=self.near_plane, far_plane=self.far_plane, eps2d=self.eps2d,
            antialiased=self.rasterize_mode == "antialiased",
        )
        features = sh_colors(means if colour_means is None else colour_means, model.params["sh0"], model.params["shN"],
                             viewmats, sh_degree)
        return proj, features

    def _composite(self, proj: Projection, features: Tensor, width: int, height: int, background: Tensor,
                   wanted: Wanted, geometry: Tuple[Tensor, Tensor, Tensor, Tensor],
                   absgrad_into: Tuple[Tensor, int]) -> RenderResult:
        """Composite colours and the ``wanted`` extra channels; ``geometry`` is (means, quats,
        scales, viewmats) for the normals (the depths come from the projection).
        ``absgrad_into`` (the means2d tensor of ``info``, this projection's first camera in it)
        receives the absolute gradients when ``self.absgrad`` is set."""
        C = proj.means2d.shape[0]
        backgrounds = background.expand(C, 3)
        extra, reference = extra_features(wanted, *geometry, depths=proj.depths)
        if extra is not None:
            # 5 to 7 channels are padded to 8, which the library has vector kernels for
            pad = KERNEL_CHANNELS - 3 - extra.shape[-1] if 3 + extra.shape[-1] > 4 else 0
            features = torch.cat([features, extra, features.new_zeros(*extra.shape[:-1], pad)], dim=-1)
            backgrounds = torch.cat([backgrounds, background.new_zeros(C, extra.shape[-1] + pad)], dim=-1)
        render, alpha, info = composite(
            proj, features, width, height, tile_size=self.tile_size, backgrounds=backgrounds,
            median_channel=3 if wanted.median else None, absgrad=absgrad_into if self.absgrad else None,
        )
        render = render[..., :3 + wanted.channels]
        median = info.pop("median", None)
        return RenderResult(info=info, **result_fields(wanted, render, alpha, reference, median))


def auto_cpu_backend(device: torch.device, log: Message = None, warn: Message = None) -> str:
    """What ``renderer.type: auto`` means off CUDA: ``cpu`` when the compiled rasterizer builds
    (``log`` hears about a first-use compile), else ``torch`` after one ``warn`` naming why."""
    if device.type != "cpu":
        return "torch"
    try:
        load_library(log)
    except BuildError as error:
        if warn is not None:
            warn(f"using the slower PyTorch renderer: the compiled CPU rasterizer is unavailable ({error})")
        return "torch"
    return "cpu"


def require_cpu_backend(device: torch.device, log: Message = None) -> None:
    """Build (or load) the compiled rasterizer for ``renderer.type: cpu``; ConfigError if it cannot."""
    if device.type != "cpu":
        raise ConfigError(f"renderer.type 'cpu' runs on the CPU, but the run uses '{device}'; use 'auto'")
    try:
        load_library(log)
    except BuildError as error:
        raise ConfigError(f"renderer.type 'cpu' is unavailable: {error}; use 'torch' or 'auto'") from None
