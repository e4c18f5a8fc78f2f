"""An example renderer with a lifecycle: Mip-Splatting's 3D smoothing filter over another backend.

Load it from a config with ``imports: [examples/mip_splatting.py]`` and set
``renderer: {type: mip_splatting, backend: cpu}``; docs/extending.md walks through it.

Mip-Splatting (Yu et al., CVPR 2024, eq. 7-9) keeps each Gaussian at least as large as the finest
sampling any training camera has of it: the rate ``focal / depth`` (pixels per world unit) of the
cameras that see its centre. Its variance gets ``(filter_scale / rate)^2`` added on every axis
and its opacity is scaled by ``sqrt(det(S) / det(S + filter))``, so the Gaussian keeps its weight.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional

import torch
from torch import Tensor

from splattrain import RENDERERS, ConfigError, GaussianModel, Renderer, RenderResult
from splattrain.render import RenderScene, build_renderer

#: A camera sees a Gaussian whose centre projects within its image widened by this share per side.
MARGIN = 0.15


class FilteredGaussians(GaussianModel):
    """``model`` with other activated scales and opacities; it shares the raw parameters, so the
    gradients of a render reach them (backends read ``scales`` and ``opacities``)."""

    def __init__(self, model: GaussianModel, scales: Tensor, opacities: Tensor) -> None:
        self.params, self.sh_degree = model.params, model.sh_degree
        self._scales, self._opacities = scales, opacities

    @property
    def scales(self) -> Tensor:
        return self._scales

    @property
    def opacities(self) -> Tensor:
        return self._opacities


@RENDERERS.register("mip_splatting")
class MipSplattingRenderer(Renderer):
    """Another renderer with Mip-Splatting's 3D smoothing filter, kept per Gaussian.

    The filter is computed at setup from the training cameras, and again at the first render
    after the strategy (or a hook) changed the Gaussians' rows; checkpoints keep it, and scene
    files hold the Gaussians with it folded into their scales and opacities.
    """

    needs_scene = True  # the commands read the run's scene for the training cameras

    def __init__(self, backend: str = "auto", filter_scale: float = math.sqrt(0.2),
                 rasterize_mode: str = "antialiased") -> None:
        super().__init__(rasterize_mode=rasterize_mode)
        if not filter_scale >= 0.0:
            raise ConfigError(f"renderer.filter_scale must be >= 0, got {filter_scale}")
        if backend != "auto" and RENDERERS.get(backend) is type(self):
            raise ConfigError("renderer.backend must name another renderer than mip_splatting")
        self.backend, self.filter_scale = backend, filter_scale
        self.inner: Optional[Renderer] = None
        self.filter: Optional[Tensor] = None  #: [N] the 3D filter's variance per Gaussian (None: stale)

    def setup(self, scene: RenderScene, model: GaussianModel) -> None:
        device = model.means.device
        spec = {"type": self.backend, "rasterize_mode": self.rasterize_mode}
        self.inner = build_renderer(spec, device, absgrad=self.absgrad)
        self.viewmats = torch.stack([camera.viewmat for camera in scene.cameras]).to(device)
        self.Ks = torch.stack([camera.K for camera in scene.cameras]).to(device)
        self.sizes = torch.tensor([[camera.width, camera.height] for camera in scene.cameras], device=device)
        self.filter = self.filter_variance(model.means)

    @torch.no_grad()
    def filter_variance(self, means: Tensor) -> Tensor:
        """(filter_scale / rate)^2 per Gaussian, ``rate`` the highest focal / depth of the cameras
        that see it (those that see none get the lowest rate of the others)."""
        rate = means.new_zeros(len(means))
        block = max(1, (1 << 22) // max(len(means), 1))  # cameras at a time: bounded memory
        for start in range(0, len(self.viewmats), block):
            viewmats, Ks = self.viewmats[start:start + block], self.Ks[start:start + block]
            points = torch.einsum("cij,nj->cni", viewmats[:, :3, :3], means) + viewmats[:, None, :3, 3]
            depth = points[..., 2].clamp_min(self.near_plane)
            x = points[..., 0] / depth * Ks[:, None, 0, 0] + Ks[:, None, 0, 2]
            y = points[..., 1] / depth * Ks[:, None, 1, 1] + Ks[:, None, 1, 2]
            w, h = self.sizes[start:start + block, 0, None], self.sizes[start:start + block, 1, None]
            seen = (points[..., 2] > self.near_plane) & (x >= -MARGIN * w) & (x <= (1 + MARGIN) * w) \
                & (y >= -MARGIN * h) & (y <= (1 + MARGIN) * h)
            focal = torch.maximum(Ks[:, 0, 0], Ks[:, 1, 1])[:, None]
            rate = torch.maximum(rate, torch.where(seen, focal / depth, 0.0).amax(dim=0))
        seen_by_any = rate > 0
        lowest = rate[seen_by_any].min() if bool(seen_by_any.any()) else rate.new_tensor(math.inf)
        return (self.filter_scale / torch.where(seen_by_any, rate, lowest)) ** 2

    def gaussians_moved(self, sources: Tensor, params: Mapping[str, Tensor]) -> None:
        self.filter = None  # recomputed at the next render, once the strategy's changes are all made

    def filtered(self, model: GaussianModel) -> FilteredGaussians:
        """``model`` with the filter applied (gradients reach its raw scales and opacities)."""
        if self.filter is None or len(self.filter) != model.num_gaussians:
            self.filter = self.filter_variance(model.means)
        variances = torch.exp(2.0 * model.params["scales"])
        smoothed = variances + self.filter[:, None]
        ratio = torch.sqrt(torch.prod(variances / smoothed, dim=-1))  # sqrt(det S / det(S + filter))
        return FilteredGaussians(model, torch.sqrt(smoothed), model.opacities * ratio)

    def render(self, model, cameras, sh_degree: int, background: Tensor, depth: bool | str = True) -> RenderResult:
        if self.inner is None:
            raise RuntimeError("MipSplattingRenderer.render before setup")
        return self.inner.render(self.filtered(model), cameras, sh_degree, background, depth=depth)

    @torch.no_grad()
    def export_gaussians(self, model: GaussianModel) -> GaussianModel:
        filtered = self.filtered(model)
        opacities = filtered.opacities.double().clamp(1e-12, 1.0 - 1e-12)  # finite logits
        return GaussianModel({**model.state_dict(), "scales": torch.log(filtered.scales),
                              "opacities": torch.logit(opacities).float()}, model.sh_degree)

    def state_dict(self) -> Dict[str, Any]:
        return {} if self.filter is None else {"filter": self.filter.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved = state.get("filter")
        if saved is not None and (not isinstance(saved, Tensor) or saved.dim() != 1):
            raise ValueError("the filter is not one variance per Gaussian")
        self.filter = None if saved is None else saved.to(self.viewmats.device)

    def training_threads(self):
        return self.inner.training_threads() if self.inner is not None else super().training_threads()
