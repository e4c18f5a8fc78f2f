"""The default strategy's per-step densification statistics: image-plane gradient norms, visibility
counts and largest screen radii of the Gaussians a step's renders saw."""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from torch import Tensor


def accumulate_visible(state: Dict[str, Any], grads: Tensor, radii: Tensor, width: int, height: int,
                       n_cameras: int, track_radii: bool) -> None:
    """Add one step's statistics to ``state["grad2d"]``, ``state["count"]`` and (with
    ``track_radii``) ``state["radii"]``.

    ``grads`` [C, N, 2] are the image-plane gradients of the means, ``radii`` [C, N, 2] their
    screen radii. For every (camera, Gaussian) with both radii positive: the gradient's norm in
    [-1, 1] screen units times the step's view count is added to ``grad2d``, 1 to ``count``, and
    the larger radius over the image's larger side raises ``radii`` where it is larger. On the
    CPU, once the compiled library is loaded, one library call does it; elsewhere PyTorch, with
    the same arithmetic.
    """
    scale_x, scale_y = width / 2.0 * n_cameras, height / 2.0 * n_cameras
    if not _accumulate_compiled(state, grads, radii, scale_x, scale_y, float(max(width, height)), track_radii):
        _accumulate_torch(state, grads, radii, scale_x, scale_y, float(max(width, height)), track_radii)


def _accumulate_compiled(state: Dict[str, Any], grads: Tensor, radii: Tensor, scale_x: float, scale_y: float,
                         longest: float, track_radii: bool) -> bool:
    from ..kernels.build import loaded_library

    library = loaded_library()
    targets = [state["grad2d"], state["count"], *([state["radii"]] if track_radii else [])]
    if library is None or grads.device.type != "cpu" or grads.dtype != torch.float32 or radii.dim() != 3 \
            or any(t.dtype != torch.float32 or not t.is_contiguous() for t in targets):
        return False
    grads, radii = grads.contiguous(), radii.to(torch.int32).contiguous()
    n_cams, n_gauss = radii.shape[:2]
    library.handle.splat_accumulate_grad2d_f32(
        grads.data_ptr(), radii.data_ptr(), n_cams, n_gauss, scale_x, scale_y, longest,
        state["grad2d"].data_ptr(), state["count"].data_ptr(), state["radii"].data_ptr() if track_radii else None,
    )
    return True


def _accumulate_torch(state: Dict[str, Any], grads: Tensor, radii: Tensor, scale_x: float, scale_y: float,
                      longest: float, track_radii: bool, ids: Optional[Tensor] = None) -> None:
    grads = grads.clone()
    grads[..., 0] *= scale_x
    grads[..., 1] *= scale_y
    if ids is None:
        visible = (radii > 0.0).all(dim=-1)  # [C, N]
        ids, grads, radii = torch.where(visible)[1], grads[visible], radii[visible]
    state["grad2d"].index_add_(0, ids, grads.norm(dim=-1))
    state["count"].index_add_(0, ids, torch.ones_like(ids, dtype=torch.float32))
    if track_radii:
        largest = radii.max(dim=-1).values / longest
        state["radii"].scatter_reduce_(0, ids, largest.to(state["radii"].dtype), reduce="amax")


def accumulate_packed(state: Dict[str, Any], grads: Tensor, radii: Tensor, ids: Tensor, width: int, height: int,
                      n_cameras: int, track_radii: bool) -> None:
    """:func:`accumulate_visible` for packed renders: one row per visible (camera, Gaussian),
    ``ids`` naming its Gaussian."""
    _accumulate_torch(state, grads, radii, width / 2.0 * n_cameras, height / 2.0 * n_cameras,
                      float(max(width, height)), track_radii, ids=ids)
