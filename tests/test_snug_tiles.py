"""Tile lists cut to each Gaussian's ellipse at the alpha threshold: fewer intersections, the
same images and gradients (bit for bit) as lists of whole bounding rectangles."""

from __future__ import annotations

import pytest
import torch

from splattrain.render import cpu
from splattrain.render.cpu.rasterizer import _Composite
from test_cpu_rasterizer import library  # noqa: F401  (fixture: the library in a temporary cache)
from test_rasterizer import make_scene


def _composite(proj, colors, isects, width, height):
    leaves = [t.detach().clone().requires_grad_(True) for t in (proj.means2d, proj.conics, proj.opacities, colors)]
    render, trans = _Composite.apply(*leaves, isects, width, height)
    weights = torch.linspace(-1, 1, render.numel()).reshape(render.shape)
    ((render * weights).sum() + trans.sum()).backward()
    return render, trans, [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
@pytest.mark.parametrize("tile_size", [8, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_snug_lists_give_the_same_images_and_gradients(library, mode, tile_size, dtype):  # noqa: F811
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
