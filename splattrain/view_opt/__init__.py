"""Per-view corrections learned with the scene: appearance (exposure, white balance) and poses."""

from .appearance import AffineAppearance
from .base import ViewCorrection
from .corrections import ViewCorrections
from .pose import SE3PoseRefinement

__all__ = ["AffineAppearance", "SE3PoseRefinement", "ViewCorrection", "ViewCorrections"]
