"""The Gaussian scene model."""

from .gaussians import GaussianModel, degree_for_step, rgb_to_sh

__all__ = ["GaussianModel", "degree_for_step", "rgb_to_sh"]
