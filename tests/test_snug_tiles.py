"""Tile lists cut to each Gaussian's ellipse at the alpha threshold: fewer intersections, the
same images and gradients (bit for bit) as lists of whole bounding rectangles."""

from __future__ import annotations

import pytest
import torch

from splattrain.render import cpu_rasterizer as cpu
from splattrain.render.cpu_rasterizer import _Composite
from test_rasterizer import make_scene


def _composite(proj, colors, isects, width, height):
    leaves = [t.detach().clone().requires_grad_(True) for t in (proj.means2d, proj.conics, proj.opacities, colors)]
    render, trans, _ = _Composite.apply(*leaves, isects, width, height)  # no median channel asked
    weights = torch.linspace(-1, 1, render.numel()).reshape(render.shape)
    ((render * weights).sum() + trans.sum()).backward()
    return render, trans, [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
@pytest.mark.parametrize("tile_size", [8, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_snug_lists_give_the_same_images_and_gradients(library, mode, tile_size, dtype):
    scene = make_scene(3, n=400, width=70, height=53, n_cams=2)
    means, quats, scales, opacities, colors = (getattr(scene, k).to(dtype) for k in
                                               ("means", "quats", "scales", "opacities", "colors"))
    width, height = scene.width, scene.height
    proj = cpu.project(means, quats, scales, opacities, scene.viewmats.to(dtype), scene.Ks.to(dtype), width, height,
                       antialiased=mode == "antialiased")
    colors = colors.expand(proj.means2d.shape[0], -1, -1) if colors.dim() == 2 else colors
    args = (proj.means2d.detach(), proj.radii, proj.depths.detach(), width, height, tile_size)
    full = cpu.intersect_tiles(*args)
    snug = cpu.intersect_tiles(*args, proj.conics, proj.opacities)
    assert snug.flatten_ids.numel() < 0.9 * full.flatten_ids.numel()
    assert (snug.tiles_per_gauss <= full.tiles_per_gauss).all()
    ours, ref = _composite(proj, colors, snug, width, height), _composite(proj, colors, full, width, height)
    assert torch.equal(ours[0], ref[0]) and torch.equal(ours[1], ref[1])
    for mine, theirs in zip(ours[2], ref[2]):
        assert torch.equal(mine, theirs)


REACH_MARGIN = 0.05  # rasterize.cpp's kReachMargin: the level is 2 (log(opacity / threshold) + margin)


def _min_over_rectangles(a, b, c, x0, x1, y0, y1):
    """min of q = a x^2 + 2 b x y + c y^2 over [x0, x1] x [y0, y1] (float64, broadcast): zero when
    the rectangle holds the origin, else the least of the four edges' minima."""
    def q(x, y):
        return a * x * x + 2 * b * x * y + c * y * y

    edges = torch.stack([
        q(x0, (-b * x0 / c).clamp(y0, y1)), q(x1, (-b * x1 / c).clamp(y0, y1)),
        q((-b * y0 / a).clamp(x0, x1), y0), q((-b * y1 / a).clamp(x0, x1), y1),
    ]).amin(0)
    inside = (x0 <= 0) & (0 <= x1) & (y0 <= 0) & (0 <= y1)
    return torch.where(inside, torch.zeros_like(edges), edges)


@pytest.mark.parametrize("tile_size", [4, 7, 16])
def test_each_listed_tile_is_one_the_ellipse_reaches(library, tile_size):
    """Tile by tile against a reference in float64: a Gaussian is listed in a tile of its
    rectangle exactly when the least value of its quadratic form over the tile's pixel centres'
    rectangle is within the level (up to rounding), for tilted, thin and large ellipses (some
    rectangles of more than 64 tiles), faint ones and means between pixel centres."""
    gen = torch.Generator().manual_seed(tile_size)
    n, width, height = 600, 150, 110
    means2d = torch.rand(1, n, 2, generator=gen) * torch.tensor([190.0, 150.0]) - 20
    means2d[0, :60] = torch.randint(0, 40, (60, 2), generator=gen) * 4.0 + 0.9  # between pixel centres
    shape = torch.randn(n, 2, 2, generator=gen) * (torch.rand(n, 1, 1, generator=gen) * 20 + 0.2)
    cov = shape @ shape.transpose(-1, -2) + 0.3 * torch.eye(2)
    inv = torch.linalg.inv(cov)
    conics = torch.stack([inv[:, 0, 0], inv[:, 0, 1], inv[:, 1, 1]], -1)[None].contiguous()
    radii = (3 * torch.stack([cov[:, 0, 0], cov[:, 1, 1]], -1).sqrt()).ceil().int()[None]
    opacities = torch.rand(1, n, generator=gen) * 0.999 + 0.001  # some below the alpha threshold
    depths = torch.rand(1, n, generator=gen) + 1
    snug = cpu.intersect_tiles(means2d, radii, depths, width, height, tile_size, conics, opacities)
    full = cpu.intersect_tiles(means2d, radii, depths, width, height, tile_size)
    assert int(full.tiles_per_gauss.max()) > 64

    tiles_x = (width + tile_size - 1) // tile_size
    ids, tiles = full.flatten_ids.long(), (full.isect_ids >> 32).long()  # one camera: the tile
    listed = set(zip(snug.flatten_ids.tolist(), (snug.isect_ids >> 32).tolist()))
    ty, tx = tiles // tiles_x, tiles % tiles_x
    mean = means2d[0, ids].double()
    a, b, c = conics[0, ids].double().unbind(-1)
    x0 = (tx * tile_size).double() + 0.5 - mean[:, 0]
    x1 = ((tx + 1) * tile_size).clamp(max=width).double() - 0.5 - mean[:, 0]
    y0 = (ty * tile_size).double() + 0.5 - mean[:, 1]
    y1 = ((ty + 1) * tile_size).clamp(max=height).double() - 0.5 - mean[:, 1]
    least = _min_over_rectangles(a, b, c, x0, x1, y0, y1)
    level = (2 * (torch.log(opacities[0, ids].double() * 255) + REACH_MARGIN)).clamp(min=0)
    reached = least <= level
    unsure = (least - level).abs() <= 1e-9 * (1 + level)
    found = torch.tensor([(i, t) in listed for i, t in zip(ids.tolist(), tiles.tolist())])
    assert 0 < int(found.sum()) < 0.8 * len(found)
    assert torch.equal(found[~unsure], reached[~unsure])


def test_inputs_of_the_wrong_shape_are_refused_before_the_kernels_read_them():
    means2d, depths = torch.zeros(1, 4, 2), torch.ones(1, 4)
    radii = torch.full((1, 4, 2), 3, dtype=torch.int32)
    assert cpu.intersect_tiles(means2d, radii, depths, 32, 32, 16).flatten_ids.numel() == 4
    with pytest.raises(ValueError, match=r"radii has shape \(1, 4\), expected \(1, 4, 2\)"):
        cpu.intersect_tiles(means2d, radii[..., 0], depths, 32, 32, 16)
    with pytest.raises(ValueError, match="conics has shape"):
        cpu.intersect_tiles(means2d, radii, depths, 32, 32, 16, torch.ones(1, 4, 2), torch.ones(1, 4))
