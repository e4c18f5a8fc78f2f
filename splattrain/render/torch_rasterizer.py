"""A pure-PyTorch, differentiable, tile-based 3D Gaussian rasterizer.

It reproduces ``gsplat.rasterization(..., sh_degree=None, packed=False, render_mode="RGB")``
for pinhole cameras on any device, CPU included: projection and tile binning as gsplat's
kernels do them (:mod:`splattrain.render.projection`), then per pixel front-to-back compositing with gsplat's rules (``alpha = min(0.999, o * exp(-sigma))``,
  skip ``sigma < 0`` or ``alpha < 1/255``, stop before the transmittance drops to ``1e-4``).

Compositing evaluates every (pixel, Gaussian) pair of a tile densely. Tiles are grouped and
their depth-sorted lists walked in segments of about SEGMENT_PAIRS pairs; a tile leaves once all
its pixels are saturated, like gsplat's early exit. The backward pass is hand written and
recomputes each segment instead of storing it, so memory stays bounded by the segment size.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .projection import (
    ALPHA_THRESHOLD, TileIntersections, gsplat_info, intersect_tiles, project, project_for_rasterizer,
)

ALPHA_MAX = 0.999
"""Per-Gaussian alpha is clamped to this (gsplat's CUDA kernels use 0.999)."""
TRANSMITTANCE_MIN = 1e-4
"""A Gaussian that would bring a pixel's transmittance to this or below ends that pixel."""
SIGMA_MAX = 80.0
"""Larger Mahalanobis terms are capped here; exp(-80) is far below any alpha threshold."""
SEGMENT_PAIRS = 1 << 19
"""Pixel-Gaussian pairs evaluated at once (tiles x pixels x slots) when compositing."""
MIN_SEGMENT_SLOTS = 32
"""Fewest depth-list slots per segment; bounds how many tiles are composited together."""
COMPOSITE_TILE_SIZE = 8
"""Tiles are re-binned to at most this size for compositing. Smaller tiles fit the Gaussians'
footprints more tightly, so fewer empty pixel-Gaussian pairs get evaluated; the output does not
depend on it, and ``info`` always describes ``tile_size`` tiles."""
SCRATCH_MAX_ELEMENTS = 1 << 22
"""Scratch buffers up to this size are kept for reuse; larger ones (huge tiles) are freed."""

# Parameter table columns: mean x, mean y, conic a, b, c, opacity, then the colours.
_GEOMETRY = 6


@dataclass
class _Segment:
    """A run of slots ``[start, start + K)`` of some tiles' depth-sorted lists, composited at once.

    Attributes:
        tiles: int64 [B] global tile index (camera * tiles per image + tile).
        slots: int64 [B, K] row of the parameter table per slot; padding uses the empty last row.
        pix_x: [B, S] pixel-centre x of each tile column (S = tile size).
        pix_y: [B, S] pixel-centre y of each tile row.
        trans_in: [B, S * S] transmittance entering the segment; 0 for finished pixels.
    """

    tiles: Tensor
    slots: Tensor
    pix_x: Tensor
    pix_y: Tensor
    trans_in: Tensor


class _TileLists:
    """Per-tile views of the sorted intersection lists, for cutting out segments."""

    def __init__(self, isects: TileIntersections, empty_slot: int, dtype: torch.dtype) -> None:
        self.isects = isects
        self.offsets = isects.isect_offsets.flatten().long()
        self.flatten_ids = isects.flatten_ids.long()
        n_isects = self.flatten_ids.numel()
        self.counts = torch.diff(self.offsets, append=self.offsets.new_tensor([n_isects]))
        self.empty_slot = empty_slot
        self.dtype = dtype

    def busy_tiles(self) -> Tensor:
        """Tiles with at least one Gaussian, longest lists first."""
        order = torch.argsort(self.counts, descending=True, stable=True)
        return order[: int((self.counts > 0).sum())]

    def segment(self, tiles: Tensor, start: int, n_slots: int, trans_in: Tensor) -> _Segment:
        """Slots ``[start, start + n_slots)`` of ``tiles``' lists, padded with the empty slot."""
        rank = start + torch.arange(n_slots, device=tiles.device)
        index = (self.offsets[tiles, None] + rank).clamp(max=max(self.flatten_ids.numel() - 1, 0))
        slots = torch.where(rank < self.counts[tiles, None], self.flatten_ids[index], self.empty_slot)
        size = self.isects.tile_size
        local = tiles % (self.isects.tile_width * self.isects.tile_height)
        offset = torch.arange(size, device=tiles.device, dtype=self.dtype) + 0.5
        pix_x = (local % self.isects.tile_width * size).to(self.dtype)[:, None] + offset
        pix_y = (local // self.isects.tile_width * size).to(self.dtype)[:, None] + offset
        return _Segment(tiles, slots, pix_x, pix_y, trans_in)


def _just_below(value: float, dtype: torch.dtype) -> float:
    """The largest ``dtype`` number below ``value`` (turns ``x > t`` tests into ``x >= value``)."""
    target = torch.tensor(value, dtype=dtype, device="cpu")  # a host constant: no device read
    return torch.nextafter(target, torch.tensor(-math.inf, dtype=dtype, device="cpu")).item()


class _Scratch:
    """Named scratch buffers for the large per-segment tensors, reused across segments and calls.

    On CPU every fresh multi-megabyte tensor is newly mapped memory, and its page faults cost
    more than the arithmetic done on it; reusing a handful of buffers avoids that.
    """

    def __init__(self) -> None:
        self._buffers: Dict[Tuple[str, torch.device, torch.dtype], Tensor] = {}

    def get(self, name: str, shape: Tuple[int, ...], like: Tensor) -> Tensor:
        """An uninitialised tensor of ``shape`` (dtype and device of ``like``) for ``name``."""
        key = (name, like.device, like.dtype)
        numel = math.prod(shape)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.numel() < numel:
            buffer = torch.empty(numel, device=like.device, dtype=like.dtype)
            if numel <= SCRATCH_MAX_ELEMENTS:
                self._buffers[key] = buffer
        return buffer[:numel].view(shape)


_THREAD_STATE = threading.local()


def _scratch() -> _Scratch:
    """This thread's scratch buffers."""
    if not hasattr(_THREAD_STATE, "scratch"):
        _THREAD_STATE.scratch = _Scratch()
    return _THREAD_STATE.scratch


def _pair_alphas(params: Tensor, seg: _Segment, scratch: _Scratch) -> Tuple[Tensor, Tensor, Tensor]:
    """Unclamped alpha of every (pixel, slot) pair of a segment: [B, S, S, K], rows then columns.

    Pairs that gsplat skips (``sigma < 0`` or ``alpha < 1/255``) get alpha 0. Also returns the
    offsets mean - pixel centre along x ([B, S, K], per column) and y ([B, S, K], per row).
    """
    mean_x, mean_y, con_a, con_b, con_c, opacity = params[..., :_GEOMETRY].unbind(-1)
    dx = mean_x[:, None, :] - seg.pix_x[:, :, None]
    dy = mean_y[:, None, :] - seg.pix_y[:, :, None]
    sigma_x = 0.5 * con_a[:, None, :] * dx * dx
    sigma_y = 0.5 * con_c[:, None, :] * dy * dy
    n_tiles, size, n_slots = dx.shape
    sigma = scratch.get("sigma", (n_tiles, size, size, n_slots), params)
    torch.add(sigma_y[:, :, None, :], sigma_x[:, None, :, :], out=sigma)
    sigma.addcmul_((con_b[:, None, :] * dy)[:, :, None, :], dx[:, None, :, :])
    # sigma < 0 is skipped; capping sigma keeps exp() off its slow underflow path, and any pair
    # with sigma >= SIGMA_MAX is far below the alpha threshold anyway.
    F.threshold_(sigma, -torch.finfo(sigma.dtype).tiny, SIGMA_MAX).clamp_max_(SIGMA_MAX)
    alpha = sigma.neg_().exp_().mul_(opacity[:, None, None, :])
    F.threshold_(alpha, _just_below(ALPHA_THRESHOLD, alpha.dtype), 0.0)
    return alpha, dx, dy


def _transmittance(alpha: Tensor, trans_in: Tensor, scratch: _Scratch) -> Tuple[Tensor, Tensor]:
    """Transmittance before each slot and after the last ([B, S, S, K + 1]), and the kept slots.

    The products run in the same order as gsplat's per-pixel loop. A slot is kept (1.0, else 0.0)
    while the transmittance after it stays above TRANSMITTANCE_MIN; as the transmittance never
    rises, a pixel's kept slots form a prefix, and a finished pixel (``trans_in`` 0) keeps none.
    """
    trans = scratch.get("trans", alpha.shape[:-1] + (alpha.shape[-1] + 1,), alpha)
    trans[..., 0] = trans_in.view(alpha.shape[:-1])
    torch.sub(alpha.new_ones(()), alpha, out=trans[..., 1:])
    trans.cumprod_(-1)
    kept = torch.gt(trans[..., 1:], TRANSMITTANCE_MIN, out=scratch.get("kept", alpha.shape, alpha))
    return trans, kept


class _Composite(torch.autograd.Function):
    """Front-to-back compositing in segments, with a hand-written, recomputing backward pass.

    Input: the parameter table [C * N + 1, 6 + D] (mean x, mean y, conic a, b, c, opacity,
    colour) whose last row is an all-zero padding Gaussian. Outputs, in tile layout: colours
    [n_tiles, D, S * S] and final transmittances [n_tiles, S * S].

    Each group of similarly long tiles walks its depth-sorted lists in segments of about
    SEGMENT_PAIRS pairs, dropping tiles whose pixels have all finished (gsplat's early exit).
    With ``absgrad_target`` (the [C, N, 2] means2d tensor) the backward pass also sets its
    ``absgrad``: the sum over pixels of |d loss / d mean| per pixel, as gsplat's ``absgrad=True``.
    """

    @staticmethod
    def forward(
        ctx: Any, table: Tensor, lists: _TileLists, inside: Tensor, absgrad_target: Optional[Tensor] = None,
        median_channel: Optional[int] = None,
    ) -> Tuple[Tensor, Tensor, Tensor]:
        scratch = _scratch()
        pixels = inside.shape[1]
        render = table.new_zeros(inside.shape[0], table.shape[1] - _GEOMETRY, pixels)
        trans_final = table.new_ones(inside.shape)
        median = table.new_zeros(inside.shape if median_channel is not None else (0,))
        alive = inside.clone()
        segments = []
        group_size = max(1, SEGMENT_PAIRS // (pixels * MIN_SEGMENT_SLOTS))
        for group in lists.busy_tiles().split(group_size):
            tiles, start = group, 0
            while tiles.numel():
                n_slots = max(MIN_SEGMENT_SLOTS, SEGMENT_PAIRS // (tiles.numel() * pixels))
                n_slots = min(n_slots, int(lists.counts[tiles].max()) - start)
                seg = lists.segment(tiles, start, n_slots, trans_final[tiles] * alive[tiles])
                colors = _segment_forward(table, seg, trans_final, alive, scratch,
                                          median if median_channel is not None else None, median_channel)
                render.index_add_(0, tiles, colors)
                segments.append(seg)
                start += n_slots
                tiles = tiles[alive[tiles].any(1) & (lists.counts[tiles] > start)]
        ctx.save_for_backward(table, trans_final)
        ctx.segments = segments
        ctx.absgrad_target = absgrad_target
        ctx.mark_non_differentiable(median)
        return render, trans_final, median

    @staticmethod
    def backward(ctx: Any, grad_render: Tensor, grad_trans: Tensor, _: Tensor) -> Tuple[Optional[Tensor], ...]:
        table, trans_final = ctx.saved_tensors
        scratch = _scratch()
        grad_table = torch.zeros_like(table)
        grad_trans = grad_trans * trans_final
        behind = torch.zeros_like(trans_final)  # colour . grad of the segments behind, per pixel
        columns = torch.arange(table.shape[1], device=table.device)
        target = ctx.absgrad_target
        abs_means = table.new_zeros(table.shape[0], 2) if target is not None else None
        for seg in reversed(ctx.segments):
            grads, seg_abs = _segment_backward(
                table[seg.slots], seg, grad_render[seg.tiles], grad_trans[seg.tiles], behind, scratch,
                absgrad=target is not None,
            )
            # A flat 1D index_add_ is much faster on CPU than a row-wise one.
            index = (seg.slots[..., None] * table.shape[1] + columns).flatten()
            grad_table.view(-1).index_add_(0, index, grads.flatten())
            if abs_means is not None:
                abs_means.index_add_(0, seg.slots.flatten(), seg_abs.flatten(0, 1))
        if target is not None:
            target.absgrad = abs_means[:-1].view_as(target)
        return grad_table, None, None, None, None


def _segment_forward(
    table: Tensor, seg: _Segment, trans_final: Tensor, alive: Tensor, scratch: _Scratch,
    median: Optional[Tensor] = None, median_channel: Optional[int] = None,
) -> Tensor:
    """Composite one segment: returns its colours [B, D, S * S] and updates the per-pixel
    transmittance ``trans_final`` and ``alive`` (not yet finished) state in place, and with
    ``median`` [n_tiles, S * S] the median depth: colour channel ``median_channel`` of the last
    contributing slot in front of which the transmittance is above 0.5."""
    params = table[seg.slots]
    n_tiles, n_slots = seg.slots.shape
    alpha = _pair_alphas(params, seg, scratch)[0].clamp_max_(ALPHA_MAX)
    trans, kept = _transmittance(alpha, seg.trans_in, scratch)
    weights = alpha.mul_(kept).mul_(trans[..., :-1]).view(n_tiles, -1, n_slots)
    if median is not None:  # finished pixels enter with transmittance 0: no slot of theirs counts
        above = (weights > 0) & (trans[..., :-1].reshape(n_tiles, -1, n_slots) > 0.5)
        last = (above * torch.arange(1, n_slots + 1, device=above.device)).amax(-1)  # 0: none here
        depth = params[..., _GEOMETRY + median_channel].gather(1, (last - 1).clamp_min(0))
        median[seg.tiles] = torch.where(last > 0, depth, median[seg.tiles])
    colors_t = params[..., _GEOMETRY:].transpose(1, 2).contiguous()

    was_alive = alive[seg.tiles]
    trans_out = trans.gather(-1, kept.sum(-1, keepdim=True).long()).view(n_tiles, -1)
    trans_final[seg.tiles] = torch.where(was_alive, trans_out, trans_final[seg.tiles])
    alive[seg.tiles] = was_alive & (kept[..., -1].view(n_tiles, -1) > 0)
    return torch.bmm(colors_t, weights.transpose(1, 2))


def _segment_backward(
    params: Tensor,
    seg: _Segment,
    grad_rgb: Tensor,
    grad_t: Tensor,
    behind: Tensor,
    scratch: _Scratch,
    absgrad: bool = False,
) -> Tuple[Tensor, Optional[Tensor]]:
    """Gradient of one segment w.r.t. its slots' parameters: [B, K, 6 + D], and with ``absgrad``
    the sum over pixels of |d loss / d mean x|, |d loss / d mean y| per slot: [B, K, 2] (else None).

    ``grad_rgb`` [B, D, S * S] is d loss / d colour; ``grad_t`` [B, S * S] is
    d loss / d final transmittance, times that transmittance. ``behind`` [n_tiles, S * S] holds
    sum(weight * colour . grad_rgb) over the segments behind this one, and is updated in place.

    For a kept slot, with c = colour . grad_rgb and suffix = sum of weight * c over the slots
    behind it: d loss / d alpha = (T_after * c - suffix - grad_t) / (1 - alpha).
    """
    n_tiles, n_slots = seg.slots.shape
    size = seg.pix_x.shape[1]
    alpha_raw, dx, dy = _pair_alphas(params, seg, scratch)
    alpha = scratch.get("alpha", alpha_raw.shape, alpha_raw)
    torch.clamp(alpha_raw, max=ALPHA_MAX, out=alpha)
    trans, kept = _transmittance(alpha, seg.trans_in, scratch)
    alpha.mul_(kept)
    weights = torch.mul(alpha, trans[..., :-1], out=scratch.get("weights", alpha.shape, alpha))

    grad_colors = torch.bmm(grad_rgb, weights.view(n_tiles, size * size, n_slots))
    colors_t = params[..., _GEOMETRY:].transpose(1, 2).contiguous()
    color_dot = scratch.get("color_dot", alpha.shape, alpha)
    torch.bmm(grad_rgb.transpose(1, 2), colors_t, out=color_dot.view(n_tiles, size * size, n_slots))
    prefix = weights.mul_(color_dot).cumsum_(-1)
    # suffix = (segment total - prefix) + behind this segment, so the numerator is
    # prefix + T_after * c - (segment total + behind + grad_t).
    behind_from_here = behind[seg.tiles] + prefix[..., -1].flatten(1)
    behind[seg.tiles] = behind_from_here
    offset = (behind_from_here + grad_t).view(n_tiles, size, size, 1)
    numerator = prefix.addcmul_(trans[..., 1:], color_dot).sub_(offset)
    one_minus_alpha = torch.sub(alpha.new_ones(()), alpha, out=color_dot)
    # d alpha / d sigma = -alpha, zero where alpha was clamped, skipped or not kept.
    grad_sigma = F.threshold_(alpha_raw.neg_(), _just_below(-ALPHA_MAX, alpha.dtype), 0.0)
    grad_sigma.mul_(kept).div_(one_minus_alpha).mul_(numerator)

    per_col = grad_sigma.sum(1)  # [B, S, K], summed over rows
    per_row = grad_sigma.sum(2)  # [B, S, K], summed over columns
    per_row_dx = torch.mul(grad_sigma, dx[:, None], out=numerator).sum(2)
    g_dx, g_dx2 = (per_col * dx).sum(1), (per_col * dx * dx).sum(1)
    g_dy, g_dy2 = (per_row * dy).sum(1), (per_row * dy * dy).sum(1)
    g_dxdy = (per_row_dx * dy).sum(1)

    _, _, con_a, con_b, con_c, opacity = params[..., :_GEOMETRY].unbind(-1)
    geometric = torch.stack(
        [
            con_a * g_dx + con_b * g_dy,
            con_b * g_dx + con_c * g_dy,
            0.5 * g_dx2,
            g_dxdy,
            0.5 * g_dy2,
            -per_row.sum(1) / opacity.clamp(min=torch.finfo(opacity.dtype).tiny),
        ],
        dim=-1,
    )
    abs_means = None
    if absgrad:  # per pixel, d sigma / d mean = (a dx + b dy, b dx + c dy)
        a, b, c = (v[:, None, None, :] for v in (con_a, con_b, con_c))
        col_dx, row_dy = dx[:, None], dy[:, :, None]
        abs_x = (grad_sigma * (a * col_dx + b * row_dy)).abs_().sum((1, 2))
        abs_y = (grad_sigma * (b * col_dx + c * row_dy)).abs_().sum((1, 2))
        abs_means = torch.stack([abs_x, abs_y], dim=-1)
    return torch.cat([geometric, grad_colors.transpose(1, 2)], dim=-1), abs_means


def _untile(
    tiled: Tensor, n_cams: int, isects: TileIntersections, width: int, height: int
) -> Tensor:
    """[C * tiles, D, S * S] in tile layout -> [C, H, W, D] image layout."""
    size = isects.tile_size
    image = tiled.view(n_cams, isects.tile_height, isects.tile_width, -1, size, size)
    image = image.permute(0, 1, 4, 2, 5, 3).reshape(
        n_cams, isects.tile_height * size, isects.tile_width * size, -1
    )
    return image[:, :height, :width]


def _inside_pixels(
    n_cams: int, isects: TileIntersections, width: int, height: int, device: torch.device
) -> Tensor:
    """bool [C * tiles, S * S] in tile layout: which tile pixels lie inside the image."""
    size, tiles_x, tiles_y = isects.tile_size, isects.tile_width, isects.tile_height
    rows = (torch.arange(tiles_y * size, device=device) < height).view(tiles_y, 1, size, 1)
    cols = (torch.arange(tiles_x * size, device=device) < width).view(1, tiles_x, 1, size)
    return (rows & cols).reshape(1, tiles_y * tiles_x, size * size).expand(n_cams, -1, -1).flatten(0, 1)



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
    absgrad: bool = False,
    median_channel: Optional[int] = None,
) -> Tuple[Tensor, Tensor, Dict[str, Any]]:
    """Render Gaussians into C pinhole cameras, like ``gsplat.rasterization`` with
    ``sh_degree=None, packed=False, render_mode="RGB"``.

    Args:
        means: [N, 3] world positions. quats: [N, 4] wxyz (normalised here).
        scales: [N, 3] positive scales. opacities: [N] in (0, 1).
        colors: [N, D] or [C, N, D] features to composite.
        viewmats: [C, 4, 4] world-to-camera (OpenCV axes). Ks: [C, 3, 3] intrinsics.
        width, height: image size in pixels.
        rasterize_mode: "classic", or "antialiased" (opacities times the blur compensation).
        backgrounds: optional [C, D] colours composited behind the Gaussians.
        absgrad: also set ``info["means2d"].absgrad`` in the backward pass (gsplat's AbsGS option).
        median_channel: also put ``info["median"]`` [C, H, W, 1]: per pixel, channel
            ``median_channel`` of ``colors`` (a depth) of the last contributing Gaussian in front
            of which the transmittance is above 0.5; 0 where none contributes (no gradient).

    Returns:
        ``(render [C, H, W, D], alphas [C, H, W, 1], info)`` where ``info`` has gsplat's meta
        keys (radii, means2d, depths, conics, opacities, tile and intersection data, ...).
        Differentiable w.r.t. means, quats, scales, opacities, colors and backgrounds.
    """
    n_cams, n_gauss = viewmats.shape[0], means.shape[0]
    proj, colors = project_for_rasterizer(project, means, quats, scales, opacities, colors, viewmats, Ks, width,
                                          height, near_plane, far_plane, eps2d, rasterize_mode)
    means2d, depths = proj.means2d.detach(), proj.depths.detach()
    isects = intersect_tiles(means2d, proj.radii, depths, width, height, tile_size)
    composite_size = min(tile_size, COMPOSITE_TILE_SIZE)
    if composite_size != tile_size:
        composite = intersect_tiles(means2d, proj.radii, depths, width, height, composite_size)
    else:
        composite = isects

    table = torch.cat([proj.means2d, proj.conics, proj.opacities[..., None], colors], dim=-1)
    table = torch.cat([table.flatten(0, 1), table.new_zeros(1, table.shape[-1])])
    lists = _TileLists(composite, n_cams * n_gauss, table.dtype)
    inside = _inside_pixels(n_cams, composite, width, height, table.device)
    render_tiles, trans_tiles, median_tiles = _Composite.apply(table, lists, inside, proj.means2d if absgrad else None,
                                                               median_channel)

    render = _untile(render_tiles, n_cams, composite, width, height)
    trans = _untile(trans_tiles[:, None], n_cams, composite, width, height)
    if backgrounds is not None:
        render = render + trans * backgrounds[:, None, None, :]
    info = gsplat_info(proj, isects, width, height, tile_size)
    if median_channel is not None:
        info["median"] = _untile(median_tiles[:, None], n_cams, composite, width, height)
    return render, 1.0 - trans, info
