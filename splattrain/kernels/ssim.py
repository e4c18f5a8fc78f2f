"""SSIM of channels-last image batches in C++ (``ssim.cpp``), with its gradient.

The same value as ``pytorch_msssim.ssim(..., data_range=1.0)`` on [N, H, W, C] images, computed
in two passes over the pixels instead of a few dozen whole-tensor operations. The gradient
reaches the prediction only.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from .build import Library, loaded_library
from .threads import loop_threads

_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
_WINDOW = 11


def _padded_map_size(side: int) -> int:
    """The SSIM map's derivatives along a side, stored with a window's width of zeros less one
    either side (short sides are not blurred: no padding)."""
    return side + _WINDOW - 1 if side >= _WINDOW else side


class _SSIM(torch.autograd.Function):
    """Mean SSIM of [N, H, W, C] images; the forward pass keeps the derivative maps (padded
    [3, N * C, H', W']) that the backward pass blurs back onto the prediction."""

    @staticmethod
    def forward(ctx: Any, pred: Tensor, target: Tensor, library: Library) -> Tensor:
        pred, target = pred.contiguous(), target.to(pred.dtype).contiguous()
        n, h, w, c = pred.shape
        suffix = _SUFFIX[pred.dtype]
        dmaps = pred.new_empty(3, n * c, _padded_map_size(h), _padded_map_size(w)) if ctx.needs_input_grad[0] else None
        value = getattr(library.handle, f"splat_ssim_forward_{suffix}")(
            pred.data_ptr(), target.data_ptr(), n, h, w, c, loop_threads(),
            dmaps.data_ptr() if dmaps is not None else None,
        )
        ctx.save_for_backward(pred, target, dmaps)
        ctx.library = library
        return pred.new_tensor(value)

    @staticmethod
    def backward(ctx: Any, grad_value: Tensor) -> Tuple[Optional[Tensor], ...]:
        pred, target, dmaps = ctx.saved_tensors
        n, h, w, c = pred.shape
        grad = torch.empty_like(pred)
        getattr(ctx.library.handle, f"splat_ssim_backward_{_SUFFIX[pred.dtype]}")(
            pred.data_ptr(), target.data_ptr(), n, h, w, c, loop_threads(), dmaps.data_ptr(),
            float(grad_value), grad.data_ptr(),
        )
        return grad, None, None


def compiled_ssim_applies(pred: Tensor, target: Tensor) -> bool:
    """Whether :func:`compiled_ssim` can take these images: CPU float32 / float64 [N, H, W, C] of
    one shape, no gradient wanted for ``target``, and the library already loaded in this process
    (this never compiles it)."""
    return (
        loaded_library() is not None
        and pred.device.type == "cpu" and target.device.type == "cpu"
        and pred.dtype in _SUFFIX and pred.dim() == 4 and pred.shape == target.shape
        and not target.requires_grad
    )


def compiled_ssim(pred: Tensor, target: Tensor) -> Tensor:
    """Mean SSIM (a 0-d tensor) of [N, H, W, C] images in [0, 1]: 11x11 Gaussian window, sigma 1.5,
    pytorch_msssim's constants; differentiable with respect to ``pred``. Needs
    :func:`compiled_ssim_applies`."""
    library = loaded_library()
    if library is None:
        raise RuntimeError("the compiled CPU library is not loaded")
    return _SSIM.apply(pred, target, library)

