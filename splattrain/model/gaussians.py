"""The Gaussian scene: parameters in gsplat's layout and their activations."""

from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import Tensor

from .neighbours import mean_knn_distance

SH_C0 = 0.28209479177387814


def rgb_to_sh(rgb: Tensor) -> Tensor:
    """Degree-0 SH coefficient that renders as ``rgb``."""
    return (rgb - 0.5) / SH_C0


def num_sh_bases(degree: int) -> int:
    """Number of SH coefficients per channel up to ``degree``."""
    return (degree + 1) ** 2


class GaussianModel:
    """A set of 3D Gaussians stored as raw (pre-activation) parameters.

    ``params`` holds ``means`` [N,3], ``scales`` [N,3] (log), ``quats`` [N,4] (wxyz,
    unnormalised), ``opacities`` [N] (logit), ``sh0`` [N,1,3] and ``shN`` [N,K-1,3], the
    names gsplat's densification strategies expect.
    """

    def __init__(self, params: Dict[str, Tensor], sh_degree: int) -> None:
        self.params = torch.nn.ParameterDict({k: torch.nn.Parameter(v) for k, v in params.items()})
        self.sh_degree = sh_degree

    # -- construction ---------------------------------------------------------------
    @classmethod
    def from_points(
        cls,
        points: Tensor,
        colors: Tensor,
        sh_degree: int,
        *,
        opacity: float = 0.1,
        scale_factor: float = 1.0,
        generator: Optional[torch.Generator] = None,
    ) -> "GaussianModel":
        """Gaussians at ``points`` [N,3] with RGB ``colors`` [N,3] in [0,1]."""
        points = points.float()
        n = points.shape[0]
        dist = mean_knn_distance(points).clamp_min(1e-7)
        scales = torch.log(dist * scale_factor)[:, None].repeat(1, 3)
        quats = torch.rand((n, 4), generator=generator)
        opacities = torch.logit(torch.full((n,), opacity))
        sh = torch.zeros((n, num_sh_bases(sh_degree), 3))
        sh[:, 0, :] = rgb_to_sh(colors.float())
        params = {
            "means": points,
            "scales": scales,
            "quats": quats,
            "opacities": opacities,
            "sh0": sh[:, :1, :].contiguous(),
            "shN": sh[:, 1:, :].contiguous(),
        }
        return cls(params, sh_degree)

    @classmethod
    def random(
        cls,
        num_points: int,
        center: Tensor,
        extent: float,
        sh_degree: int,
        *,
        opacity: float = 0.1,
        scale_factor: float = 1.0,
        generator: Optional[torch.Generator] = None,
    ) -> "GaussianModel":
        """``num_points`` Gaussians uniform in the cube ``center +- extent`` with random colours."""
        points = (torch.rand((num_points, 3), generator=generator) * 2 - 1) * extent + center
        colors = torch.rand((num_points, 3), generator=generator)
        return cls.from_points(points, colors, sh_degree, opacity=opacity, scale_factor=scale_factor, generator=generator)

    @classmethod
    def empty_like_state(cls, state: Dict[str, Tensor], sh_degree: int) -> "GaussianModel":
        """A model whose tensors have the shapes stored in ``state`` (values loaded later)."""
        return cls({k: torch.zeros_like(v) for k, v in state.items()}, sh_degree)

    # -- activated views ------------------------------------------------------------
    @property
    def num_gaussians(self) -> int:
        return int(self.params["means"].shape[0])

    @property
    def means(self) -> Tensor:
        return self.params["means"]

    @property
    def quats(self) -> Tensor:
        return self.params["quats"]

    @property
    def scales(self) -> Tensor:
        """Positive scales (exp of the stored log-scales)."""
        return torch.exp(self.params["scales"])

    @property
    def opacities(self) -> Tensor:
        """Opacities in (0, 1) (sigmoid of the stored logits)."""
        return torch.sigmoid(self.params["opacities"])

    @property
    def sh_coeffs(self) -> Tensor:
        """All SH coefficients [N, (degree+1)^2, 3]."""
        return torch.cat([self.params["sh0"], self.params["shN"]], dim=1)

    # -- state ----------------------------------------------------------------------
    def to(self, device: torch.device | str) -> "GaussianModel":
        self.params = self.params.to(device)
        return self

    def state_dict(self) -> Dict[str, Tensor]:
        """Raw parameter tensors (detached, on their device)."""
        return {k: v.detach().clone() for k, v in self.params.items()}

    def load_state_dict(self, state: Dict[str, Tensor]) -> None:
        """Replace all parameters with ``state`` (the Gaussian count may change)."""
        device = self.params["means"].device
        missing = set(self.params.keys()) ^ set(state.keys())
        if missing:
            raise KeyError(f"Gaussian state keys differ: {sorted(missing)}")
        for key, value in state.items():
            self.params[key] = torch.nn.Parameter(value.to(device).clone())


def degree_for_step(step: int, interval: int, max_degree: int) -> int:
    """Active SH degree at ``step``: one more every ``interval`` steps, capped at ``max_degree``."""
    if interval <= 0:
        return max_degree
    return min(max_degree, (step - 1) // interval) if step > 0 else 0


__all__ = ["GaussianModel", "SH_C0", "degree_for_step", "mean_knn_distance", "num_sh_bases", "rgb_to_sh"]
