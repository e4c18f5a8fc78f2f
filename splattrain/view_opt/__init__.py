"""Per-view corrections learned with the scene: appearance (exposure, white balance) and poses."""

from .appearance import AffineAppearance
from .base import ViewCorrection
from .bilateral import BilateralGridAppearance
from .corrections import ViewCorrections
from .pose import SE3PoseRefinement

__all__ = ["AffineAppearance", "BilateralGridAppearance", "SE3PoseRefinement", "ViewCorrection", "ViewCorrections"]
