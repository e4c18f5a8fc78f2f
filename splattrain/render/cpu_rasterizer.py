"""The compiled CPU rasterizer: projection, SH colours, tile binning and compositing in C++.

Each stage is a ``torch.autograd.Function`` (or a no-grad call) around the library built from
``project.cpp`` and ``rasterize.cpp``, running on ``loop_threads()`` threads with
hand-written backward passes. The rules, outputs and ``info`` are those of
:func:`splattrain.render.torch_rasterizer.rasterize` and of ``sh_colors``, the references this
backend is tested against. Gradients reach the Gaussians' parameters, colours and backgrounds,
not the cameras.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor

from .projection import Projection, TileIntersections, gsplat_info, project_for_rasterizer
from ..kernels.build import load_library
from ..kernels.threads import loop_threads

_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}


def _fn(name: str, dtype: torch.dtype) -> Any:
    """The library function ``splat_<name>`` for ``dtype``."""
    if dtype not in _SUFFIX:
        raise ValueError(f"the CPU rasterizer supports float32 and float64, not {dtype}")
    return getattr(load_library().handle, f"splat_{name}_{_SUFFIX[dtype]}")


def _ptrs(*tensors: Tensor) -> Tuple[int, ...]:
    """Data pointers for a library call; the caller keeps the tensors alive until it returns."""
    return tuple(t.data_ptr() for t in tensors)


class _Project(torch.autograd.Function):
    """EWA projection (``projection.project``'s rules); outputs radii, means2d, depths,
    conics and opacities per camera."""

    @staticmethod
    def forward(
        ctx: Any, means: Tensor, quats: Tensor, scales: Tensor, opacities: Tensor,
        viewmats: Tensor, Ks: Tensor, settings: Tuple[Any, ...],
    ) -> Tuple[Tensor, ...]:
        inputs = tuple(t.to(means.dtype).contiguous() for t in (means, quats, scales, opacities))
        cams = tuple(t.to(means.dtype).contiguous() for t in (viewmats, Ks))
        n_cams, n_gauss = viewmats.shape[0], means.shape[0]
        radii = torch.empty(n_cams, n_gauss, 2, dtype=torch.int32)
        outputs = (
            means.new_empty(n_cams, n_gauss, 2),
            means.new_empty(n_cams, n_gauss),
            means.new_empty(n_cams, n_gauss, 3),
            means.new_empty(n_cams, n_gauss),
        )
        _fn("project_forward", means.dtype)(
            *_ptrs(*inputs, *cams), n_cams, n_gauss, *settings, loop_threads(),
            *_ptrs(radii, *outputs),
        )
        ctx.save_for_backward(*inputs, *cams)
        ctx.settings = settings
        ctx.mark_non_differentiable(radii)
        return (radii, *outputs)

    @staticmethod
    def backward(ctx: Any, _: Tensor, *grads: Tensor) -> Tuple[Optional[Tensor], ...]:
        *inputs, viewmats, Ks = ctx.saved_tensors
        grads = tuple(g.contiguous() for g in grads)
        results = tuple(torch.empty_like(t) for t in inputs)
        _fn("project_backward", inputs[0].dtype)(
            *_ptrs(*inputs, viewmats, Ks), viewmats.shape[0], inputs[0].shape[0], *ctx.settings,
            loop_threads(), *_ptrs(*grads, *results),
        )
        return (*results, None, None, None)


def project(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    opacities: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    *,
    near_plane: float = 0.01,
    far_plane: float = 1e10,
    eps2d: float = 0.3,
    antialiased: bool = False,
) -> Projection:
    """:func:`splattrain.render.projection.project` in C++ (no gradient to the cameras)."""
    settings = (width, height, near_plane, far_plane, eps2d, int(antialiased))
    radii, means2d, depths, conics, opacities_out = _Project.apply(
        means, quats, scales, opacities, viewmats, Ks, settings
    )
    return Projection(radii, means2d, depths, conics, opacities_out)


class _SHColors(torch.autograd.Function):
    """View-dependent colours from SH coefficients, split as the model stores them."""

    @staticmethod
    def forward(
        ctx: Any, means: Tensor, sh0: Tensor, shN: Tensor, viewmats: Tensor, degree: int
    ) -> Tensor:
        inputs = tuple(t.to(means.dtype).contiguous() for t in (means, sh0, shN))
        viewmats = viewmats.to(means.dtype).contiguous()
        n_cams, n_gauss = viewmats.shape[0], means.shape[0]
        colors = means.new_empty(n_cams, n_gauss, 3)
        _fn("sh_forward", means.dtype)(
            *_ptrs(*inputs), shN.shape[1], viewmats.data_ptr(), n_cams, n_gauss, degree,
            loop_threads(), colors.data_ptr(),
        )
        ctx.save_for_backward(*inputs, viewmats)
        ctx.degree = degree
        return colors

    @staticmethod
    def backward(ctx: Any, grad_colors: Tensor) -> Tuple[Optional[Tensor], ...]:
        means, sh0, shN, viewmats = ctx.saved_tensors
        results = tuple(torch.empty_like(t) for t in (means, sh0, shN))
        grad_colors = grad_colors.contiguous()
        _fn("sh_backward", means.dtype)(
            *_ptrs(means, sh0, shN), shN.shape[1], viewmats.data_ptr(), viewmats.shape[0],
            means.shape[0], ctx.degree, loop_threads(), *_ptrs(grad_colors, *results),
        )
        return (*results, None, None)


def sh_colors(means: Tensor, sh0: Tensor, shN: Tensor, viewmats: Tensor, degree: int) -> Tensor:
    """RGB per camera [C, N, 3] from SH up to ``degree`` (0-4), as gsplat evaluates it:
    SH of the direction from the camera centre to the mean, plus 0.5, clamped at 0.

    ``sh0`` [N, 1, 3] and ``shN`` [N, K - 1, 3] hold the coefficients, K >= (degree + 1)^2.
    """
    if not 0 <= degree <= 4 or (degree + 1) ** 2 > 1 + shN.shape[1]:
        raise ValueError(f"SH degree {degree} needs (degree + 1)^2 <= {1 + shN.shape[1]} coefficients and degree <= 4")
    return _SHColors.apply(means, sh0, shN, viewmats, degree)


@torch.no_grad()
def intersect_tiles(
    means2d: Tensor, radii: Tensor, depths: Tensor, width: int, height: int, tile_size: int,
    conics: Optional[Tensor] = None, opacities: Optional[Tensor] = None,
) -> TileIntersections:
    """Bin projected Gaussians into tiles, each list sorted front to back (gsplat's layout).

    Without ``conics`` and ``opacities``: the same result as
    :func:`splattrain.render.projection.intersect_tiles` (every tile of each Gaussian's
    bounding rectangle). With them, tiles of the rectangle that the Gaussian's ellipse at the
    alpha threshold misses are left out: they hold no pixel it contributes to, so compositing
    gives the same images and gradients from fewer intersections. Shapes: ``means2d`` [C, N, 2],
    ``radii`` [C, N, 2] (x and y), ``depths`` and ``opacities`` [C, N], ``conics`` [C, N, 3].
    """
    n_cams, n_gauss = depths.shape
    for name, tensor, shape in (("means2d", means2d, (n_cams, n_gauss, 2)), ("radii", radii, (n_cams, n_gauss, 2)),
                                ("conics", conics, (n_cams, n_gauss, 3)), ("opacities", opacities, (n_cams, n_gauss))):
        if tensor is not None and tuple(tensor.shape) != shape:  # the kernels read these sizes unchecked
            raise ValueError(f"intersect_tiles: {name} has shape {tuple(tensor.shape)}, expected {shape}")
    tile_width, tile_height = math.ceil(width / tile_size), math.ceil(height / tile_size)
    means2d, radii = means2d.contiguous(), radii.int().contiguous()
    depths = depths.float().contiguous()
    snug = conics is not None and opacities is not None
    if snug:
        conics = conics.detach().to(means2d.dtype).contiguous()
        opacities = opacities.detach().to(means2d.dtype).contiguous()
    shape = (conics, opacities) if snug else (None, None)
    tiles_per_gauss = torch.empty(n_cams, n_gauss, dtype=torch.int32)
    rects = torch.empty(n_cams, n_gauss, 4, dtype=torch.int32)  # tile rectangles, from count to fill
    masks = torch.empty(n_cams, n_gauss, dtype=torch.int64)  # which tiles of small rectangles count
    pointers = (means2d.data_ptr(), *(None if t is None else t.data_ptr() for t in shape))
    n_isects = _fn("bin_count", means2d.dtype)(
        pointers[0], radii.data_ptr(), *pointers[1:], n_cams, n_gauss, tile_size, tile_width, tile_height,
        width, height, loop_threads(), *_ptrs(tiles_per_gauss, rects, masks),
    )
    isect_ids = torch.empty(n_isects, dtype=torch.int64)
    flatten_ids = torch.empty(n_isects, dtype=torch.int32)
    offsets = torch.empty(n_cams, tile_height, tile_width, dtype=torch.int32)
    _fn("bin_fill", means2d.dtype)(
        depths.data_ptr(), *pointers, n_cams, n_gauss, tile_size, tile_width, tile_height, width, height,
        loop_threads(), *_ptrs(tiles_per_gauss, rects, masks, isect_ids, flatten_ids, offsets),
    )
    return TileIntersections(
        tile_size, tile_width, tile_height, tiles_per_gauss, isect_ids, flatten_ids, offsets
    )


def _scene_args(
    tensors: Tuple[Tensor, ...], reach: Tensor, isects: TileIntersections, width: int, height: int,
    backgrounds: Optional[Tensor],
) -> Tuple[Any, ...]:
    """The leading arguments shared by the forward and backward library calls. ``reach``
    [C * N, 4] float64 is filled by the forward pass and read by the backward pass."""
    means2d, conics, opacities, colors = tensors
    return (
        *_ptrs(means2d, conics, opacities, colors, isects.isect_offsets, isects.flatten_ids),
        isects.flatten_ids.numel(), means2d.shape[0], means2d.shape[0] * means2d.shape[1],
        width, height, isects.tile_size, isects.tile_width, isects.tile_height, colors.shape[-1],
        loop_threads(), reach.data_ptr(), None if backgrounds is None else backgrounds.data_ptr(),
    )


class _Composite(torch.autograd.Function):
    """Per-pixel front-to-back compositing in C++, with its hand-written backward.

    Inputs: means2d [C, N, 2], conics [C, N, 3], opacities [C, N], colors [C, N, D], the tile
    intersections and (optionally, without a gradient) backgrounds [C, D] composited behind.
    Outputs: colours [C, H, W, D], final transmittances [C, H, W, 1] and, with ``median_channel``,
    that channel's median [C, H, W, 1] (as in the PyTorch rasterizer; no gradient), else an empty
    tensor. With ``absgrad`` = (tensor, first camera), the backward pass writes the sum over
    pixels of |d loss / d mean| per pixel (gsplat's ``absgrad``) into ``tensor.absgrad`` [C', N, 2]
    from that camera on, creating it on first use: cameras composited apart can share one.
    """

    @staticmethod
    def forward(
        ctx: Any, means2d: Tensor, conics: Tensor, opacities: Tensor, colors: Tensor,
        isects: TileIntersections, width: int, height: int, backgrounds: Optional[Tensor] = None,
        median_channel: Optional[int] = None, absgrad: Optional[Tuple[Tensor, int]] = None,
    ) -> Tuple[Tensor, Tensor, Tensor]:
        tensors = tuple(t.to(means2d.dtype).contiguous() for t in (means2d, conics, opacities, colors))
        n_cams, channels = means2d.shape[0], colors.shape[-1]
        if backgrounds is not None:
            backgrounds = backgrounds.to(means2d.dtype).expand(n_cams, channels).contiguous()
        render = means2d.new_empty(n_cams, height, width, channels)
        trans = means2d.new_empty(n_cams, height, width, 1)
        last = torch.empty(n_cams, height, width, dtype=torch.int32)
        reach = torch.empty(means2d.shape[0] * means2d.shape[1], 4, dtype=torch.float64)
        if median_channel is not None and not 0 <= median_channel < channels:
            raise ValueError(f"median_channel {median_channel} is not one of the {channels} channels")
        median = means2d.new_empty((n_cams, height, width, 1) if median_channel is not None else (0,))
        _fn("forward", means2d.dtype)(
            *_scene_args(tensors, reach, isects, width, height, backgrounds), *_ptrs(render, trans, last),
            -1 if median_channel is None else median_channel, median.data_ptr() if median.numel() else None,
        )
        ctx.save_for_backward(*tensors, reach, trans, last)
        ctx.isects, ctx.size, ctx.backgrounds, ctx.absgrad = isects, (width, height), backgrounds, absgrad
        ctx.mark_non_differentiable(median)
        return render, trans, median

    @staticmethod
    def backward(ctx: Any, grad_render: Tensor, grad_trans: Tensor, _: Tensor) -> Tuple[Optional[Tensor], ...]:
        *tensors, reach, trans, last = ctx.saved_tensors
        isects: TileIntersections = ctx.isects
        grads = [torch.empty_like(t) for t in tensors]
        grad_abs = torch.empty_like(tensors[0]) if ctx.absgrad is not None else None
        rows = tensors[3].shape[-1] + 6 + (2 if grad_abs is not None else 0)
        grad_isect = tensors[0].new_empty(isects.flatten_ids.numel(), rows)
        grad_render, grad_trans = grad_render.contiguous(), grad_trans.contiguous()
        _fn("backward", tensors[0].dtype)(
            *_scene_args(tuple(tensors), reach, isects, *ctx.size, ctx.backgrounds),
            trans.data_ptr(), last.data_ptr(), grad_render.data_ptr(), grad_trans.data_ptr(),
            grad_isect.data_ptr(), *(g.data_ptr() for g in grads), None if grad_abs is None else grad_abs.data_ptr(),
        )
        if grad_abs is not None:
            target, first = ctx.absgrad
            if getattr(target, "absgrad", None) is None:
                target.absgrad = torch.zeros_like(target)
            target.absgrad[first:first + grad_abs.shape[0]] = grad_abs  # each backward pass anew, as gsplat
        return (*grads, None, None, None, None, None, None)


def composite(
    proj: Projection,
    colors: Tensor,
    width: int,
    height: int,
    *,
    tile_size: int = 16,
    backgrounds: Optional[Tensor] = None,
    median_channel: Optional[int] = None,
    absgrad: Optional[Tuple[Tensor, int]] = None,
) -> Tuple[Tensor, Tensor, Dict[str, Any]]:
    """Bin projected Gaussians into tiles and composite ``colors`` [C, N, D] front to back:
    the second half of :func:`rasterize`, with the same outputs (``info["median"]`` with
    ``median_channel``). ``absgrad`` (tensor, first camera): where the backward pass writes the
    absolute mean gradients (see ``_Composite``)."""
    isects = intersect_tiles(proj.means2d.detach(), proj.radii, proj.depths.detach(), width, height, tile_size,
                             proj.conics, proj.opacities)
    in_kernel = backgrounds is not None and not backgrounds.requires_grad
    render, trans, median = _Composite.apply(
        proj.means2d, proj.conics, proj.opacities, colors, isects, width, height,
        backgrounds.detach() if in_kernel else None, median_channel, absgrad,
    )
    if backgrounds is not None and not in_kernel:  # a background that learns: composited here
        render = render + trans * backgrounds[:, None, None, :]
    info = gsplat_info(proj, isects, width, height, tile_size)
    if median_channel is not None:
        info["median"] = median
    return render, 1.0 - trans, info


def rasterize(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    opacities: Tensor,
    colors: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    *,
    near_plane: float = 0.01,
    far_plane: float = 1e10,
    eps2d: float = 0.3,
    tile_size: int = 16,
    rasterize_mode: str = "classic",
    backgrounds: Optional[Tensor] = None,
    median_channel: Optional[int] = None,
    absgrad: bool = False,
) -> Tuple[Tensor, Tensor, Dict[str, Any]]:
    """Render Gaussians into C pinhole cameras on the CPU; the arguments, outputs and ``info``
    of :func:`splattrain.render.torch_rasterizer.rasterize` (``absgrad``: the backward pass also
    sets ``info["means2d"].absgrad``). Tensors must be float32 or
    float64 on the CPU; the library is compiled on first use (see ``build.load_library``).
    """
    if means.device.type != "cpu":
        raise ValueError(f"the CPU rasterizer needs CPU tensors, not {means.device}")
    proj, colors = project_for_rasterizer(project, means, quats, scales, opacities, colors, viewmats, Ks, width,
                                          height, near_plane, far_plane, eps2d, rasterize_mode)
    return composite(proj, colors, width, height, tile_size=tile_size, backgrounds=backgrounds,
                     median_channel=median_channel, absgrad=(proj.means2d, 0) if absgrad else None)
