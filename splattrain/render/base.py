"""The renderer interface every backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from torch import Tensor


@dataclass
class RenderResult:
    """What a renderer returns for a batch of C cameras.

    Attributes:
        rgb: [C, H, W, 3] colours composited over the background.
        alpha: [C, H, W, 1] accumulated opacity.
        depth: [C, H, W, 1] expected depth (accumulated depth / alpha), or None.
        info: intermediate results shaped like gsplat's ``meta`` dict (radii, means2d,
            depths, conics, width, height, n_cameras, ...), which densification reads.
    """

    rgb: Tensor
    alpha: Tensor
    depth: Optional[Tensor] = None
    info: Dict[str, Any] = field(default_factory=dict)
