"""Loss terms: the protocol and the built-in terms (photometric, regularisers, depth)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, Mapping, Optional

import torch
from torch import Tensor

from ..errors import ConfigError
from ..registry import LOSSES
from .ssim import masked_ssim, ssim_nhwc

if TYPE_CHECKING:  # pragma: no cover
    from ..model.gaussians import GaussianModel
    from ..render.base import RenderResult

Batch = Mapping[str, Any]


class LossTerm(ABC):
    """Base class of loss terms (register subclasses with ``@LOSSES.register("name")``).

    A term is built from ``{type: name, weight: w, **options}``; each step the trainer calls
    ``term(render, batch, model)`` for every rendered batch and adds ``weight`` x the returned
    scalar to the loss. ``render`` is the :class:`~splattrain.RenderResult` (``rgb`` [C,H,W,3],
    ``alpha``, ``depth`` when ``needs_depth``), ``batch`` the training batch (``image`` [C,H,W,3],
    ``mask`` bool [C,H,W,1] when the dataset has masks, ``depth`` [C,H,W,1] when it has depth
    maps, ``camera``, ``image_id``, ``background``, ``step`` in training), ``model`` the
    :class:`~splattrain.GaussianModel`. A term that cannot apply to this run says why in
    :meth:`unavailable` (asked once, when the trainer is built) and is skipped with one warning.
    Terms keep no state in checkpoints: they are rebuilt from their options.
    """

    #: Set when the term reads ``render.depth`` (training renders then include depth).
    needs_depth: bool = False
    #: The renderer's extra images the term reads (``normals``, ``distortion``: see
    #: ``Renderer.extra_outputs``); a renderer that cannot render them makes the term unavailable.
    needs_outputs: FrozenSet[str] = frozenset()

    def __init__(self, weight: float = 1.0) -> None:
        if not weight >= 0.0 or weight == float("inf"):
            raise ConfigError(f"loss term {type(self).__name__}: weight must be a finite number >= 0, got {weight}")
        self.weight = float(weight)

    @abstractmethod
    def __call__(self, render: "RenderResult", batch: Batch, model: "GaussianModel") -> Tensor:
        """The term's unweighted value, a 0-d tensor."""

    def unavailable(self, trainer: Any) -> Optional[str]:
        """Why this term cannot be used in ``trainer``'s run (None: it can)."""
        return None


def _masked(pred: Tensor, target: Tensor, batch: Batch) -> Tensor:
    """``pred`` with the masked-out pixels replaced by the target (no loss, no gradient there)."""
    mask = batch.get("mask")
    return pred if mask is None else torch.where(mask, pred, target)


def _pixel_mean(values: Tensor, batch: Batch) -> Tensor:
    """Mean over pixels and channels; over the unmasked pixels when the batch has a mask."""
    mask = batch.get("mask")
    if mask is None:
        return values.mean()
    return values.sum() / (mask.sum() * values.shape[-1]).clamp_min(1)


@LOSSES.register("l1")
class L1Loss(LossTerm):
    """Mean absolute colour error (over unmasked pixels when the dataset has masks)."""

    def __call__(self, render, batch, model) -> Tensor:
        target = batch["image"]
        return _pixel_mean((_masked(render.rgb, target, batch) - target).abs(), batch)


@LOSSES.register("l2")
class L2Loss(LossTerm):
    """Mean squared colour error (over unmasked pixels when the dataset has masks)."""

    def __call__(self, render, batch, model) -> Tensor:
        target = batch["image"]
        return _pixel_mean((_masked(render.rgb, target, batch) - target).square(), batch)


@LOSSES.register("dssim")
class DSSIMLoss(LossTerm):
    """1 - SSIM (11x11 Gaussian window; over windows centred on unmasked pixels with masks)."""

    def __call__(self, render, batch, model) -> Tensor:
        target, mask = batch["image"], batch.get("mask")
        if mask is None:
            return 1.0 - ssim_nhwc(render.rgb, target)
        return 1.0 - masked_ssim(_masked(render.rgb, target, batch), target, mask)


@LOSSES.register("opacity_reg")
class OpacityRegularizer(LossTerm):
    """Mean opacity of the Gaussians (MCMC's regulariser: pushes unneeded ones to vanish)."""

    def __call__(self, render, batch, model) -> Tensor:
        return torch.sigmoid(model.params["opacities"]).mean()


@LOSSES.register("scale_reg")
class ScaleRegularizer(LossTerm):
    """Mean scale of the Gaussians (MCMC's regulariser: keeps them small)."""

    def __call__(self, render, batch, model) -> Tensor:
        return torch.exp(model.params["scales"]).mean()


@LOSSES.register("depth")
class DepthLoss(LossTerm):
    """Mean absolute error of the rendered depth against the view's depth map (data.depths).

    Over pixels with a valid (> 0) target depth; ``relative`` divides by the target depth.
    Needs a dataset with depth maps (``depths/<view>.npy`` beside the images)."""

    needs_depth = True

    def __init__(self, weight: float = 1.0, relative: bool = False) -> None:
        super().__init__(weight)
        self.relative = relative

    def unavailable(self, trainer: Any) -> Optional[str]:
        if not trainer.data.has_depths:
            return "the dataset has no depth maps (a depths/ folder beside the images)"
        return None

    def __call__(self, render, batch, model) -> Tensor:
        target = batch["depth"]
        valid = target > 0
        if "mask" in batch:
            valid = valid & batch["mask"]
        error = (render.depth - target).abs()
        if self.relative:
            error = error / target.clamp_min(1e-6)
        return (error * valid).sum() / valid.sum().clamp_min(1)


def photometric_loss(
    pred: Tensor, target: Tensor, ssim_lambda: float = 0.2, mask: Optional[Tensor] = None
) -> Dict[str, Tensor]:
    """(1 - lambda) * L1 + lambda * (1 - SSIM), the 3DGS loss; returns ``l1``, ``dssim`` and ``loss``.

    With ``mask`` (bool [C,H,W,1]) only pixels where it is True count.
    """
    from ..render.base import RenderResult

    render = RenderResult(rgb=pred, alpha=pred[..., :1])
    batch: Dict[str, Any] = {"image": target} if mask is None else {"image": target, "mask": mask}
    l1 = L1Loss()(render, batch, None)
    dssim = DSSIMLoss()(render, batch, None)
    return {"l1": l1, "dssim": dssim, "loss": (1.0 - ssim_lambda) * l1 + ssim_lambda * dssim}
