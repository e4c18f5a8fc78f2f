"""TEST-ONLY: gsplat's own Python code path on CPU, its CUDA kernels replaced by reference code.

gsplat's public ``rasterization()`` is Python around CUDA kernels that ``gsplat.rendering`` imports
from ``gsplat.cuda._wrapper``. :func:`gsplat_on_cpu` swaps, for the duration of a ``with`` block,
exactly those kernel entry points (and the relocation kernel ``gsplat.relocation`` loads) for
gsplat's PyTorch reference implementations in ``gsplat.cuda._torch_impl``. ``rasterization()`` itself
-- argument checks, packing, SH colour handling, background blending, depth normalisation and the
``info`` dict -- runs unchanged.

Where the references stop short of what the kernels do, this module adds the kernel's rule,
transcribed from gsplat 1.5's CUDA sources and marked below:

- projection: the opacity-aware radius, ``radius_clip`` and packed output
  (``ProjectionEWA3DGSFused.cu`` / ``...Packed.cu``); ``sparse_grad``'s sparse COO gradients
  (``_wrapper._FullyFusedProjectionPacked.backward``);
- tile intersection in packed mode (the dense reference run on the packed rows);
- spherical harmonics ``masks`` (masked entries are 0);
- compositing: ``rasterize_to_indices_in_range`` (CUDA-only in gsplat, needed by the reference
  compositor), the two ``nerfacc`` functions the reference imports, packed inputs and ``absgrad``;
- relocation: ``RelocationCUDA.cu``'s loop, in float32.

This module imports private gsplat names; production code never does, and never patches gsplat.
"""

from __future__ import annotations

import contextlib
import math
import sys
import types
from functools import partial
from typing import Callable, Iterator, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

import gsplat.relocation as gsplat_relocation
import gsplat.rendering as gsplat_rendering
from gsplat.cuda import _torch_impl, _wrapper  # private: this test helper only

ALPHA_THRESHOLD = 1.0 / 255.0
_REFERENCE_ACCUMULATE = _torch_impl.accumulate


# -- projection ------------------------------------------------------------------------------
class _SparseRows(torch.autograd.Function):
    """Identity whose gradient is a sparse COO tensor over ``rows`` (gsplat's ``sparse_grad``)."""

    @staticmethod
    def forward(ctx, tensor: Tensor, rows: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(rows)
        ctx.shape = tensor.shape
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        (rows,) = ctx.saved_tensors
        return torch.sparse_coo_tensor(rows[None], grad[rows], ctx.shape, check_invariants=True), None


def fully_fused_projection(
    means: Tensor, covars: Optional[Tensor], quats: Optional[Tensor], scales: Optional[Tensor],
    viewmats: Tensor, Ks: Tensor, width: int, height: int, eps2d: float = 0.3, near_plane: float = 0.01,
    far_plane: float = 1e10, radius_clip: float = 0.0, packed: bool = False, sparse_grad: bool = False,
    calc_compensations: bool = False, camera_model: str = "pinhole", opacities: Optional[Tensor] = None,
):
    """``_wrapper.fully_fused_projection`` through ``_torch_impl._fully_fused_projection``."""
    assert camera_model == "pinhole" and covars is None, "only the pinhole model from quats and scales is substituted"
    batch_dims, N, C = means.shape[:-2], means.shape[-2], viewmats.shape[-3]

    def covariances(quats_: Tensor, scales_: Tensor) -> Tensor:
        return _torch_impl._quat_scale_to_covar_preci(quats_, scales_, compute_preci=False, triu=False)[0]

    with torch.no_grad():  # the kernel's validity and radius rules (ProjectionEWA3DGSFused.cu)
        means_c, covars_c = _torch_impl._world_to_cam(means, covariances(quats, scales), viewmats)
        means2d, covars2d = _torch_impl._persp_proj(means_c, covars_c, Ks, width, height)
        covars2d = covars2d + torch.eye(2, dtype=means.dtype) * eps2d
        det = covars2d[..., 0, 0] * covars2d[..., 1, 1] - covars2d[..., 0, 1] * covars2d[..., 1, 0]
        depths = means_c[..., 2]
        valid = (det > 0) & (depths >= near_plane) & (depths <= far_plane)
        extend = torch.full_like(depths, 3.33)
        if opacities is not None:
            opacity = torch.broadcast_to(opacities[..., None, :], depths.shape)
            if calc_compensations:
                det_orig = det - eps2d * (covars2d[..., 0, 0] + covars2d[..., 1, 1]) + eps2d**2
                opacity = opacity * torch.sqrt(torch.clamp(det_orig / det.clamp(min=1e-10), min=0.0))
            valid &= opacity >= ALPHA_THRESHOLD
            extend = torch.minimum(extend, torch.sqrt(2.0 * torch.log(opacity.clamp(min=ALPHA_THRESHOLD) / ALPHA_THRESHOLD)))
        radius = torch.ceil(extend[..., None] * torch.sqrt(torch.diagonal(covars2d, dim1=-2, dim2=-1).clamp(min=0)))
        valid &= ~((radius[..., 0] <= radius_clip) & (radius[..., 1] <= radius_clip))
        valid &= (means2d + radius > 0).all(-1) & (means2d - radius < torch.tensor([width, height])).all(-1)
        radii = (radius * valid[..., None]).int()

    if packed and sparse_grad:
        rows = valid.reshape(-1, C, N).any(dim=(0, 1)).nonzero().flatten()
        means, quats, scales = (None if t is None else _SparseRows.apply(t, rows) for t in (means, quats, scales))
    _, means2d, depths, conics, compensations = _torch_impl._fully_fused_projection(
        means, covariances(quats, scales), viewmats, Ks, width, height, eps2d, near_plane, far_plane,
        calc_compensations=calc_compensations, camera_model=camera_model,
    )
    if not packed:
        return radii, means2d, depths, conics, compensations
    batch_ids, camera_ids, gaussian_ids = valid.reshape(-1, C, N).nonzero(as_tuple=True)
    flat = valid.reshape(-1)
    picked = [None if t is None else t.reshape(-1, *t.shape[len(batch_dims) + 2:])[flat.nonzero().flatten()]
              for t in (radii, means2d, depths, conics, compensations)]
    return (batch_ids, camera_ids, gaussian_ids, *picked)


# -- tile intersection -------------------------------------------------------------------------
def isect_tiles(
    means2d: Tensor, radii: Tensor, depths: Tensor, tile_size: int, tile_width: int, tile_height: int,
    sort: bool = True, segmented: bool = False, packed: bool = False, n_images: Optional[int] = None,
    image_ids: Optional[Tensor] = None, gaussian_ids: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """``_wrapper.isect_tiles`` through ``_torch_impl._isect_tiles``; packed rows are laid out as
    an [n_images, nnz] dense array (row j in image ``image_ids[j]``) and mapped back."""
    if not packed:
        return _torch_impl._isect_tiles(means2d, radii, depths, tile_size, tile_width, tile_height, sort)
    nnz = means2d.shape[0]
    rows = torch.arange(nnz)
    dense_means = means2d.new_zeros(n_images, nnz, 2).index_put((image_ids, rows), means2d.detach())
    dense_radii = radii.new_zeros(n_images, nnz, 2).index_put((image_ids, rows), radii)
    dense_depths = depths.new_zeros(n_images, nnz).index_put((image_ids, rows), depths.detach())
    tiles, isect_ids, flatten_ids = _torch_impl._isect_tiles(
        dense_means, dense_radii, dense_depths, tile_size, tile_width, tile_height, sort
    )
    return tiles[image_ids, rows], isect_ids, flatten_ids % max(nnz, 1)


def isect_offset_encode(isect_ids: Tensor, n_images: int, tile_width: int, tile_height: int) -> Tensor:
    """``_wrapper.isect_offset_encode`` through ``_torch_impl._isect_offset_encode``."""
    return _torch_impl._isect_offset_encode(isect_ids, n_images, tile_width, tile_height)


# -- spherical harmonics ---------------------------------------------------------------------------
def spherical_harmonics(degrees_to_use: int, dirs: Tensor, coeffs: Tensor, masks: Optional[Tensor] = None) -> Tensor:
    """``_wrapper.spherical_harmonics`` through ``_torch_impl._spherical_harmonics``; masked rows are 0."""
    colors = _torch_impl._spherical_harmonics(degrees_to_use, dirs, coeffs)
    return colors if masks is None else colors * masks[..., None]


# -- compositing ------------------------------------------------------------------------------------
def rasterize_to_indices_in_range(
    range_start: int, range_end: int, transmittances: Tensor, means2d: Tensor, conics: Tensor,
    opacities: Tensor, image_width: int, image_height: int, tile_size: int,
    isect_offsets: Tensor, flatten_ids: Tensor,
) -> Tuple[Tensor, Tensor, Tensor]:
    """CPU stand-in for the CUDA-only ``rasterize_to_indices_in_range`` (RasterizeToIndices3DGS.cu:
    same alpha, validity and transmittance rules; pixel order)."""
    n_gauss = means2d.shape[-2]
    block = tile_size * tile_size
    offsets = isect_offsets.flatten().long()
    ends = torch.cat([offsets[1:], offsets.new_tensor([flatten_ids.numel()])])
    tile_height, tile_width = isect_offsets.shape[-2:]
    gauss_out, pixel_out = [], []
    for tile in range(offsets.numel()):
        image, local = divmod(tile, tile_height * tile_width)
        start = int(offsets[tile]) + range_start * block
        end = min(int(ends[tile]), int(offsets[tile]) + range_end * block)
        if start >= end:
            continue
        ids = flatten_ids[start:end].long()
        ys, xs = torch.meshgrid(
            torch.arange(local // tile_width * tile_size, (local // tile_width + 1) * tile_size),
            torch.arange(local % tile_width * tile_size, (local % tile_width + 1) * tile_size),
            indexing="ij",
        )
        inside = (ys < image_height) & (xs < image_width)
        ys, xs = ys[inside], xs[inside]
        delta = means2d.reshape(-1, 2)[ids][None] - torch.stack([xs, ys], -1)[:, None].to(means2d.dtype) - 0.5
        a, b, c = conics.reshape(-1, 3)[ids].unbind(-1)
        dx, dy = delta.unbind(-1)
        sigma = 0.5 * (a * dx**2 + c * dy**2) + b * dx * dy
        alpha = torch.clamp(opacities.reshape(-1)[ids] * torch.exp(-sigma), max=0.999)
        valid = (sigma >= 0) & (alpha >= ALPHA_THRESHOLD)
        pixels = ys * image_width + xs
        trans = transmittances.reshape(-1, image_height * image_width)[image][pixels][:, None] * torch.cumprod(
            1 - alpha * valid, -1
        )
        pix_idx, slot_idx = torch.nonzero(valid & (trans > 1e-4), as_tuple=True)
        gauss_out.append(ids[slot_idx] % n_gauss)
        pixel_out.append(image * image_height * image_width + pixels[pix_idx])
    gauss = torch.cat(gauss_out) if gauss_out else torch.zeros(0, dtype=torch.long)
    pixel = torch.cat(pixel_out) if pixel_out else torch.zeros(0, dtype=torch.long)
    pixel, order = torch.sort(pixel, stable=True)
    n_pixels = image_height * image_width
    return gauss[order], pixel % n_pixels, pixel // n_pixels


def fake_nerfacc() -> types.ModuleType:
    """The two ``nerfacc`` functions gsplat's reference ``accumulate`` imports, in plain PyTorch."""

    def render_weight_from_alpha(alphas: Tensor, ray_indices: Tensor, n_rays: int) -> Tuple[Tensor, Tensor]:
        counts = torch.unique_consecutive(ray_indices, return_counts=True)[1].tolist()
        per_ray = [torch.cumprod(torch.cat([a.new_ones(1), 1 - a[:-1]]), 0) for a in alphas.split(counts)]
        trans = torch.cat(per_ray) if per_ray else alphas.new_zeros(0)
        return alphas * trans, trans

    def accumulate_along_rays(weights: Tensor, values: Optional[Tensor], ray_indices: Tensor, n_rays: int) -> Tensor:
        src = weights[:, None] if values is None else weights[:, None] * values
        return src.new_zeros(n_rays, src.shape[-1]).index_add_(0, ray_indices, src)

    module = types.ModuleType("nerfacc")
    module.render_weight_from_alpha = render_weight_from_alpha
    module.accumulate_along_rays = accumulate_along_rays
    return module


def _accumulate_with_absgrad(record: Callable[[Tensor, Tensor], None]) -> Callable:
    """gsplat's reference ``accumulate``, fed one row per (pixel, Gaussian) pair so that each pair's
    gradient of the 2D mean is seen on its own; ``record(rows, |grad|)`` sums them (``absgrad``)."""

    def accumulate(means2d, conics, opacities, colors, gaussian_ids, pixel_ids, image_ids, image_width, image_height):
        n_images, n_gauss = math.prod(means2d.shape[:-2]), means2d.shape[-2]
        rows = image_ids * n_gauss + gaussian_ids
        per_pair = means2d.reshape(-1, 2)[rows]
        if per_pair.requires_grad:
            per_pair.register_hook(lambda grad: record(rows, grad.abs()))
        pairs = torch.arange(len(rows))

        def spread(t: Tensor) -> Tensor:
            values = t.reshape(n_images * n_gauss, *t.shape[len(means2d.shape) - 1:])[rows]
            return values.new_zeros(n_images, len(rows), *values.shape[1:]).index_put((image_ids, pairs), values)

        return _REFERENCE_ACCUMULATE(
            spread(means2d) if not per_pair.requires_grad else
            per_pair.new_zeros(n_images, len(rows), 2).index_put((image_ids, pairs), per_pair),
            spread(conics), spread(opacities), spread(colors), pairs, pixel_ids, image_ids, image_width, image_height,
        )

    return accumulate


def rasterize_to_pixels(
    means2d: Tensor, conics: Tensor, colors: Tensor, opacities: Tensor, image_width: int, image_height: int,
    tile_size: int, isect_offsets: Tensor, flatten_ids: Tensor, backgrounds: Optional[Tensor] = None,
    masks: Optional[Tensor] = None, packed: bool = False, absgrad: bool = False,
) -> Tuple[Tensor, Tensor]:
    """``_wrapper.rasterize_to_pixels`` through ``_torch_impl._rasterize_to_pixels``; packed rows are
    spread over the images and ``absgrad`` is summed pair by pair (RasterizeToPixels3DGSBwd.cu)."""
    assert masks is None, "tile masks are not substituted"
    image_dims = isect_offsets.shape[:-2]
    n_images = math.prod(image_dims)
    target = means2d
    if packed:
        nnz = means2d.shape[0]
        starts = isect_offsets.reshape(n_images, -1)[:, 0].long()
        image_of = torch.searchsorted(starts, torch.arange(len(flatten_ids)), right=True) - 1
        flatten_ids = (image_of * nnz + flatten_ids.long()).int()
        means2d, conics, colors = (t.expand(*image_dims, *t.shape) for t in (means2d, conics, colors))
        opacities = opacities.expand(*image_dims, nnz)
    accumulate = _REFERENCE_ACCUMULATE
    if absgrad:
        sums = means2d.new_zeros(means2d.shape).reshape(-1, 2)

        def record(rows: Tensor, grad: Tensor) -> None:
            sums.index_add_(0, rows, grad)
            target.absgrad = sums.reshape(means2d.shape).sum(0) if packed else sums.reshape(target.shape)

        accumulate = _accumulate_with_absgrad(record)
    with _patched(_torch_impl, "accumulate", accumulate):
        return _torch_impl._rasterize_to_pixels(
            means2d, conics, colors, opacities, image_width, image_height, tile_size, isect_offsets, flatten_ids,
            backgrounds=backgrounds,
        )


# -- relocation ----------------------------------------------------------------------------------------
def relocation_kernel(opacities: Tensor, scales: Tensor, ratios: Tensor, binoms: Tensor, n_max: int):
    """``RelocationCUDA.cu``'s ``relocation_kernel`` line by line, in float32 as the kernel sums."""
    f32 = np.float32
    o_all, s_all = opacities.detach().cpu().numpy(), scales.detach().cpu().numpy()
    table = binoms.detach().cpu().numpy().reshape(-1)
    new_o = np.zeros_like(o_all)
    new_s = np.zeros_like(s_all)
    for idx, n_idx in enumerate(ratios.tolist()):
        new_o[idx] = f32(1.0) - np.power(f32(1.0) - o_all[idx], f32(1.0) / f32(n_idx))
        denom_sum = f32(0.0)
        for i in range(1, n_idx + 1):
            for k in range(i):
                bin_coeff = f32(table[(i - 1) * n_max + k])
                term = (np.power(f32(-1.0), f32(k)) / np.sqrt(f32(k + 1))) * np.power(new_o[idx], f32(k + 1))
                denom_sum = f32(denom_sum + bin_coeff * term)
        coeff = f32(o_all[idx] / denom_sum)
        new_s[idx] = coeff * s_all[idx]
    return torch.from_numpy(new_o).to(opacities.device), torch.from_numpy(new_s).to(scales.device)


def _kernel_by_name(name: str) -> Callable:
    assert name == "relocation", name
    return relocation_kernel


# -- the switch ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _patched(owner, name: str, value) -> Iterator[None]:
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


@contextlib.contextmanager
def gsplat_on_cpu() -> Iterator[None]:
    """Within the block, gsplat's ``rasterization()`` and ``compute_relocation()`` run on CPU tensors
    through the substitutes above, and ``build_renderer`` accepts ``renderer.type: gsplat`` off CUDA."""
    from splattrain.engine import build as engine_build
    from splattrain.render import build

    substitutes = {
        (gsplat_rendering, "fully_fused_projection"): fully_fused_projection,
        (gsplat_rendering, "isect_tiles"): isect_tiles,
        (gsplat_rendering, "isect_offset_encode"): isect_offset_encode,
        (gsplat_rendering, "spherical_harmonics"): spherical_harmonics,
        (gsplat_rendering, "rasterize_to_pixels"): rasterize_to_pixels,
        (_wrapper, "rasterize_to_indices_in_range"): rasterize_to_indices_in_range,
        (gsplat_relocation, "_make_lazy_cuda_func"): _kernel_by_name,
        (engine_build, "build_renderer"): partial(build.build_renderer, gsplat_off_cuda=True),
    }
    with contextlib.ExitStack() as stack:
        for (owner, name), value in substitutes.items():
            stack.enter_context(_patched(owner, name, value))
        saved = sys.modules.get("nerfacc")
        sys.modules["nerfacc"] = fake_nerfacc()
        try:
            yield
        finally:
            if saved is None:
                sys.modules.pop("nerfacc", None)
            else:
                sys.modules["nerfacc"] = saved
