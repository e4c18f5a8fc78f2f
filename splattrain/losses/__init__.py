"""Loss terms, the weighted training loss built from config, and SSIM."""

from .composite import Loss, build_loss, loss_specs, unlisted_strategy_terms
from .geometry import DepthDistortionLoss, NormalConsistencyLoss, depth_normals
from .ssim import masked_ssim, ssim_map, ssim_nhwc
from .terms import DepthLoss, DSSIMLoss, L1Loss, L2Loss, LossTerm, OpacityRegularizer, ScaleRegularizer, photometric_loss

__all__ = [
    "DSSIMLoss", "DepthDistortionLoss", "DepthLoss", "L1Loss", "L2Loss", "Loss", "LossTerm", "NormalConsistencyLoss",
    "OpacityRegularizer", "ScaleRegularizer", "build_loss", "depth_normals", "loss_specs", "masked_ssim",
    "photometric_loss", "ssim_map", "ssim_nhwc", "unlisted_strategy_terms",
]
