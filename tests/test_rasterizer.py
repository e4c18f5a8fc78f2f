"""The pure-PyTorch tiled rasterizer against a dense reference and gsplat's own references.

Tolerances (float32, except the float64 gradcheck): images and alphas agree to ``atol=1e-5``; gradients to
``rtol=1e-4`` plus ``atol=1e-4 * max|reference gradient| + 1e-6`` (the floor covers gradients
that are zero up to rounding, e.g. rotations of isotropic Gaussians). Observed errors are about
1e-6 of the largest gradient.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Tuple

import pytest
import torch
from gsplat.cuda import _torch_impl, _wrapper
from gsplat.strategy import DefaultStrategy
from torch import Tensor

from splattrain.render import torch_rasterizer
from splattrain.render.projection import project
from splattrain.render.torch_rasterizer import rasterize
from gsplat_on_cpu import fake_nerfacc, rasterize_to_indices_in_range
from reference_rasterizer import composite_reference, project_reference, rasterize_reference

IMAGE_ATOL = 1e-5
GRAD_RTOL = 1e-4
GRAD_ATOL_FRACTION = 1e-4
GRAD_ATOL_FLOOR = 1e-6
PARAM_NAMES = ("means", "quats", "scales", "opacities", "colors")


@pytest.fixture(autouse=True)
def single_thread():
    """The scenes are tiny: one thread is as fast, and immune to OpenMP stalls when other
    processes keep the cores busy (two threads then run these tests ~50x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@dataclass
class Scene:
    """Gaussians (post-activation) and cameras."""

    means: Tensor
    quats: Tensor
    scales: Tensor
    opacities: Tensor
    colors: Tensor
    viewmats: Tensor
    Ks: Tensor
    width: int
    height: int

    def params(self) -> List[Tensor]:
        return [getattr(self, name) for name in PARAM_NAMES]


def look_at(eye: Tuple[float, float, float]) -> Tensor:
    """World-to-camera matrix (OpenCV axes) of a camera at ``eye`` looking at the origin."""
    eye_t = torch.tensor(eye)
    forward = -eye_t / eye_t.norm()
    right = torch.linalg.cross(forward, torch.tensor([0.0, -1.0, 0.0]))
    right = right / right.norm()
    down = torch.linalg.cross(forward, right)
    rot = torch.stack([right, down, forward])
    viewmat = torch.eye(4)
    viewmat[:3, :3] = rot
    viewmat[:3, 3] = -rot @ eye_t
    return viewmat


def make_cameras(n_cams: int, width: int, height: int) -> Tuple[Tensor, Tensor]:
    """Cameras 4 units from the origin, about 50 degrees field of view."""
    focal = 0.5 * width / math.tan(math.radians(25.0))
    K = torch.tensor(
        [[focal, 0.0, width / 2.0], [0.0, focal * 1.05, height / 2.0 - 1.3], [0.0, 0.0, 1.0]]
    )
    angles = torch.linspace(0.0, 0.8, n_cams).tolist()
    eyes = [(4.0 * math.sin(a), 0.7 * a - 0.3, -4.0 * math.cos(a)) for a in angles]
    return torch.stack([look_at(eye) for eye in eyes]), K.expand(n_cams, 3, 3).contiguous()


def make_scene(
    seed: int,
    n: int = 300,
    width: int = 40,
    height: int = 28,
    n_cams: int = 1,
    channels: int = 3,
    scale_range: Tuple[float, float] = (0.03, 0.3),
) -> Scene:
    """A seeded random scene of a few overlapping clusters in front of the cameras."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(4, 3, generator=gen) * 0.5
    means = centres[torch.randint(0, 4, (n,), generator=gen)] + torch.randn(n, 3, generator=gen) * 0.4
    log_lo, log_hi = math.log(scale_range[0]), math.log(scale_range[1])
    scales = torch.exp(torch.rand(n, 3, generator=gen) * (log_hi - log_lo) + log_lo)
    viewmats, Ks = make_cameras(n_cams, width, height)
    return Scene(
        means=means,
        quats=torch.randn(n, 4, generator=gen),
        scales=scales,
        opacities=torch.rand(n, generator=gen) * 0.9 + 0.05,
        colors=torch.rand(n, channels, generator=gen),
        viewmats=viewmats,
        Ks=Ks,
        width=width,
        height=height,
    )


@dataclass
class Result:
    render: Tensor
    alphas: Tensor
    info: dict
    grads: Dict[str, Optional[Tensor]]


def run(
    fn: Callable, scene: Scene, seed: int = 0, backgrounds: Optional[Tensor] = None, learn_background: bool = True,
    **kwargs,
) -> Result:
    """Render with ``fn``, back-propagate a fixed random linear loss, collect the gradients
    (of the backgrounds too, unless ``learn_background`` is false)."""
    leaves = [p.detach().clone().requires_grad_() for p in scene.params()]
    bg = None if backgrounds is None else backgrounds.detach().clone().requires_grad_(learn_background)
    render, alphas, info = fn(
        *leaves, scene.viewmats, scene.Ks, scene.width, scene.height, backgrounds=bg, **kwargs
    )
    gen = torch.Generator().manual_seed(seed + 1)
    loss = (render * torch.randn(render.shape, generator=gen)).sum()
    loss = loss + (alphas * torch.randn(alphas.shape, generator=gen)).sum()
    info["means2d"].retain_grad()
    loss.backward()
    grads = {name: leaf.grad for name, leaf in zip(PARAM_NAMES, leaves)}
    grads["backgrounds"] = None if bg is None else bg.grad
    return Result(render.detach(), alphas.detach(), info, grads)


def assert_grad_close(actual: Optional[Tensor], expected: Optional[Tensor], name: str) -> None:
    """Gradients agree to GRAD_RTOL plus an absolute slack relative to their largest entry."""
    actual = torch.zeros_like(expected) if actual is None else actual
    expected = torch.zeros_like(actual) if expected is None else expected
    atol = GRAD_ATOL_FRACTION * expected.abs().max().item() + GRAD_ATOL_FLOOR
    torch.testing.assert_close(actual, expected, rtol=GRAD_RTOL, atol=atol, msg=lambda m: f"{name}: {m}")


def assert_matches_reference(scene: Scene, backgrounds: Optional[Tensor] = None, **kwargs) -> Result:
    """Tiled and dense renders, alphas and all gradients agree; returns the tiled result."""
    mode = kwargs.get("rasterize_mode", "classic")
    ours = run(rasterize, scene, backgrounds=backgrounds, **kwargs)
    ref = run(rasterize_reference, scene, backgrounds=backgrounds, rasterize_mode=mode)
    torch.testing.assert_close(ours.render, ref.render, rtol=0, atol=IMAGE_ATOL)
    torch.testing.assert_close(ours.alphas, ref.alphas, rtol=0, atol=IMAGE_ATOL)
    for name in (*PARAM_NAMES, "backgrounds"):
        if ref.grads[name] is not None or ours.grads[name] is not None:
            assert_grad_close(ours.grads[name], ref.grads[name], name)
    return ours


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
@pytest.mark.parametrize("tile_size", [8, 16])
@pytest.mark.parametrize(
    "n_cams, width, height, seed", [(1, 24, 20, 0), (2, 64, 48, 1), (2, 37, 29, 2)]
)
def test_matches_dense_reference(
    mode: str, tile_size: int, n_cams: int, width: int, height: int, seed: int
):
    scene = make_scene(seed, n=300, width=width, height=height, n_cams=n_cams)
    backgrounds = torch.rand(n_cams, 3, generator=torch.Generator().manual_seed(seed))
    ours = assert_matches_reference(scene, backgrounds, tile_size=tile_size, rasterize_mode=mode)
    assert ours.render.shape == (n_cams, height, width, 3)
    assert ours.alphas.shape == (n_cams, height, width, 1)
    assert 0.05 < ours.alphas.mean() < 0.95, "the scene should be partly covered"


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
def test_per_camera_features(mode: str):
    """[C, N, D] colours with D = 4 (e.g. RGB + depth) and no background."""
    scene = make_scene(3, n=200, width=32, height=24, n_cams=2)
    scene = replace(scene, colors=torch.rand(2, 200, 4, generator=torch.Generator().manual_seed(3)))
    ours = assert_matches_reference(scene, rasterize_mode=mode)
    assert ours.render.shape == (2, 24, 32, 4)


@pytest.mark.parametrize("composite_tile, segment_pairs", [(16, 1 << 19), (4, 1 << 19), (8, 1 << 10)])
def test_composite_granularity_does_not_change_results(
    monkeypatch, composite_tile: int, segment_pairs: int
):
    """The compositing tile size and segment size (down to one tile per group) are invisible."""
    monkeypatch.setattr(torch_rasterizer, "COMPOSITE_TILE_SIZE", composite_tile)
    monkeypatch.setattr(torch_rasterizer, "SEGMENT_PAIRS", segment_pairs)
    scene = make_scene(4, n=250, width=40, height=30, n_cams=2)
    assert_matches_reference(scene, torch.rand(2, 3), tile_size=16)


def test_segments_with_early_exit_match_reference(monkeypatch):
    """Opaque overlapping Gaussians walked in tiny segments: saturated tiles leave early."""
    monkeypatch.setattr(torch_rasterizer, "SEGMENT_PAIRS", 1 << 11)
    monkeypatch.setattr(torch_rasterizer, "MIN_SEGMENT_SLOTS", 4)
    scene = make_scene(17, n=300, width=40, height=30, n_cams=2, scale_range=(0.1, 0.4))
    scene = replace(scene, opacities=0.9 + 0.1 * scene.opacities)
    ours = assert_matches_reference(scene, torch.rand(2, 3), tile_size=16)
    assert (ours.alphas > 1.0 - 1e-3).float().mean() > 0.3, "many pixels should saturate"


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
def test_gradcheck_float64(mode: str):
    """The hand-written backward against finite differences, independently of the reference."""
    scene = make_scene(18, n=12, width=16, height=12, n_cams=2, scale_range=(0.2, 0.5))
    inputs = [p.double().requires_grad_() for p in scene.params()]
    inputs.append(torch.rand(2, 3, dtype=torch.float64, requires_grad=True))
    viewmats, Ks = scene.viewmats.double(), scene.Ks.double()

    def render(*args: Tensor) -> Tuple[Tensor, Tensor]:
        out = rasterize(*args[:5], viewmats, Ks, 16, 12, backgrounds=args[5], rasterize_mode=mode)
        return out[0], out[1]

    assert torch.autograd.gradcheck(
        render, tuple(inputs), eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=True
    )


def test_projection_matches_gsplat_torch_projection():
    scene = make_scene(5, n=400, width=40, height=28, n_cams=2)
    ours = project(*scene.params()[:4], scene.viewmats, scene.Ks, 40, 28, antialiased=True)
    ref = project_reference(*scene.params()[:4], scene.viewmats, scene.Ks, 40, 28, antialiased=True)
    visible = ours.radii.gt(0).all(-1)
    assert visible.sum() > 100
    for key in ("means2d", "depths", "conics", "opacities"):
        torch.testing.assert_close(getattr(ours, key)[visible], ref[key][visible], rtol=1e-5, atol=1e-5)
    # Radii use gsplat's opacity-aware bound, never larger than the plain 3.33-sigma one.
    assert ours.radii.dtype == torch.int32
    assert (ours.radii <= ref["radii"]).all()
    assert (ref["radii"].gt(0).all(-1) | ~visible).all()


def test_gaussians_behind_camera_contribute_nothing():
    scene = make_scene(6, n=200, width=32, height=24)
    eye, forward = -scene.viewmats[0, :3, :3].T @ scene.viewmats[0, :3, 3], scene.viewmats[0, 2, :3]
    # Behind the camera, and in front of it but closer than the near plane (0.01).
    behind = eye + torch.stack([-0.5 * forward, -2.0 * forward + 0.3, 0.005 * forward])
    extra = replace(
        scene,
        means=torch.cat([scene.means, behind]),
        quats=torch.cat([scene.quats, torch.randn(3, 4)]),
        scales=torch.cat([scene.scales, torch.full((3, 3), 0.5)]),
        opacities=torch.cat([scene.opacities, torch.full((3,), 0.9)]),
        colors=torch.cat([scene.colors, torch.ones(3, 3)]),
    )
    with_extra = assert_matches_reference(extra)
    plain = run(rasterize, scene)
    assert (with_extra.info["radii"][:, -3:] == 0).all()
    torch.testing.assert_close(with_extra.render, plain.render, rtol=0, atol=1e-6)
    for name in PARAM_NAMES:
        assert (with_extra.grads[name][-3:] == 0).all(), name


def test_off_screen_gaussians_contribute_nothing():
    scene = make_scene(7, n=200, width=32, height=24)
    off = torch.tensor([[6.0, 0.0, 0.0], [0.0, -5.0, 0.0], [-3.0, 3.0, 1.0]])
    extra = replace(
        scene,
        means=torch.cat([scene.means, off]),
        quats=torch.cat([scene.quats, torch.randn(3, 4)]),
        scales=torch.cat([scene.scales, torch.full((3, 3), 0.05)]),
        opacities=torch.cat([scene.opacities, torch.full((3,), 0.9)]),
        colors=torch.cat([scene.colors, torch.ones(3, 3)]),
    )
    with_extra = assert_matches_reference(extra)
    assert (with_extra.info["radii"][:, -3:] == 0).all()
    assert (with_extra.info["tiles_per_gauss"][:, -3:] == 0).all()
    for name in PARAM_NAMES:
        assert (with_extra.grads[name][-3:] == 0).all(), name


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
def test_huge_gaussians_covering_the_image(mode: str):
    scene = make_scene(8, n=60, width=40, height=28, n_cams=2)
    scene = replace(scene, scales=torch.cat([scene.scales[:-3], torch.full((3, 3), 4.0)]))
    ours = assert_matches_reference(scene, torch.rand(2, 3), rasterize_mode=mode)
    tiles = ours.info["tile_width"] * ours.info["tile_height"]
    assert (ours.info["tiles_per_gauss"][:, -3:] == tiles).all()


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
def test_tiny_sub_pixel_gaussians(mode: str):
    # 0.02 - 0.2 pixel standard deviations: the eps2d blur dominates their footprint, and in
    # antialiased mode the compensation dims them (culling those that drop below 1/255).
    scene = make_scene(9, n=300, width=40, height=28, n_cams=2, scale_range=(2e-3, 2e-2))
    ours = assert_matches_reference(scene, torch.rand(2, 3), rasterize_mode=mode)
    assert ours.alphas.max() > (0.1 if mode == "classic" else 0.01)


def test_zero_opacity_gaussians_are_culled():
    scene = make_scene(10, n=200, width=32, height=24)
    opacities = scene.opacities.clone()
    opacities[:20] = 0.0
    ours = assert_matches_reference(replace(scene, opacities=opacities))
    assert (ours.info["radii"][:, :20] == 0).all()
    for name in PARAM_NAMES:
        assert (ours.grads[name][:20] == 0).all(), name


@pytest.mark.parametrize("n_cams", [1, 2])
def test_empty_scene_returns_background(n_cams: int):
    scene = make_scene(11, n=0, width=24, height=20, n_cams=n_cams)
    backgrounds = torch.rand(n_cams, 3)
    ours = run(rasterize, scene, backgrounds=backgrounds)
    assert ours.render.shape == (n_cams, 20, 24, 3)
    torch.testing.assert_close(ours.render, backgrounds[:, None, None, :].expand_as(ours.render))
    assert (ours.alphas == 0).all()
    ref = run(rasterize_reference, scene, backgrounds=backgrounds)
    torch.testing.assert_close(ours.grads["backgrounds"], ref.grads["backgrounds"])
    assert ours.info["radii"].shape == (n_cams, 0, 2)
    assert ours.info["flatten_ids"].numel() == 0


def _stack_at_pixel(opacity: float, n: int) -> Scene:
    """``n`` isotropic Gaussians centred on pixel (10, 8), at increasing depths."""
    viewmats, Ks = make_cameras(1, 24, 20)
    K = Ks[0]
    depths = torch.linspace(3.0, 5.0, n)
    pixel = torch.tensor([10.5, 8.5])
    cam_xy = (pixel - K[:2, 2]) / torch.stack([K[0, 0], K[1, 1]])
    cam_points = torch.cat([cam_xy * depths[:, None], depths[:, None]], dim=-1)
    rot, trans = viewmats[0, :3, :3], viewmats[0, :3, 3]
    means = (cam_points - trans) @ rot  # camera -> world
    return Scene(
        means=means,
        quats=torch.tensor([1.0, 0.0, 0.0, 0.0]).repeat(n, 1),
        scales=torch.full((n, 3), 0.05),
        opacities=torch.full((n,), opacity),
        colors=torch.rand(n, 3, generator=torch.Generator().manual_seed(12)),
        viewmats=viewmats,
        Ks=Ks,
        width=24,
        height=20,
    )


def test_transmittance_saturation_stops_compositing():
    # alpha is exactly 0.5 at the centre pixel: T after k Gaussians is 2^-k, and the 14th would
    # bring it to 6.1e-5 <= 1e-4, so exactly 13 Gaussians contribute there.
    scene = _stack_at_pixel(0.5, 30)
    ours = assert_matches_reference(scene)
    assert ours.alphas[0, 8, 10, 0].item() == 1.0 - 2.0**-13
    weights = 0.5 ** torch.arange(1, 14, dtype=torch.float64)
    expected = (weights[:, None] * scene.colors[:13].double()).sum(0).float()
    torch.testing.assert_close(ours.render[0, 8, 10], expected, rtol=0, atol=1e-6)
    colors = scene.colors.clone().requires_grad_()
    render = rasterize(*scene.params()[:4], colors, scene.viewmats, scene.Ks, 24, 20)[0]
    render[0, 8, 10].sum().backward()
    assert (colors.grad[:13] > 0).all() and (colors.grad[13:] == 0).all()


def test_opaque_gaussians_clamp_alpha_and_stop_after_one():
    # Opacity 1 clamps alpha to 0.999; the second Gaussian would leave T = 1e-6, so it is skipped.
    scene = _stack_at_pixel(1.0, 5)
    ours = assert_matches_reference(scene)
    assert ours.alphas[0, 8, 10, 0].item() == pytest.approx(0.999, abs=1e-6)
    torch.testing.assert_close(ours.render[0, 8, 10], 0.999 * scene.colors[0], rtol=0, atol=1e-6)


def test_means2d_gradient_matches_reference():
    scene = make_scene(13, n=300, width=40, height=28, n_cams=2)
    backgrounds = torch.rand(2, 3)
    ours = run(rasterize, scene, backgrounds=backgrounds)
    proj = project_reference(*scene.params()[:4], scene.viewmats, scene.Ks, 40, 28)
    means2d = proj["means2d"].detach().requires_grad_()
    visible = (proj["depths"] > 0.01) & (proj["depths"] < 1e10)
    render, alphas = composite_reference(
        means2d, proj["conics"].detach(), proj["opacities"].detach(),
        scene.colors.expand(2, -1, -1), proj["depths"].detach(), visible, 40, 28, backgrounds,
    )
    gen = torch.Generator().manual_seed(1)
    loss = (render * torch.randn(render.shape, generator=gen)).sum()
    (loss + (alphas * torch.randn(alphas.shape, generator=gen)).sum()).backward()
    assert ours.info["means2d"].grad.shape == (2, 300, 2)
    assert_grad_close(ours.info["means2d"].grad, means2d.grad, "means2d")


def test_info_drives_gsplat_default_strategy():
    scene = make_scene(14, n=300, width=40, height=28, n_cams=2, scale_range=(0.005, 0.3))
    opacities = scene.opacities.clone()
    opacities[:30] = 1e-3  # below prune_opa
    params = torch.nn.ParameterDict(
        {
            "means": scene.means.clone(),
            "scales": scene.scales.log(),
            "quats": scene.quats.clone(),
            "opacities": torch.logit(opacities),
            "colors": scene.colors.clone(),
        }
    )
    optimizers = {name: torch.optim.Adam([param], lr=1e-3) for name, param in params.items()}
    strategy = DefaultStrategy(refine_start_iter=0, refine_every=1, grow_grad2d=1e-7)
    strategy.check_sanity(params, optimizers)
    state = strategy.initialize_state(scene_scale=1.0)

    def step(step_index: int) -> dict:
        render, alphas, info = rasterize(
            params["means"], params["quats"], params["scales"].exp(), params["opacities"].sigmoid(),
            params["colors"], scene.viewmats, scene.Ks, scene.width, scene.height,
        )
        strategy.step_pre_backward(params, optimizers, state, step_index, info)
        (render.square().mean() + alphas.mean()).backward()
        for optimizer in optimizers.values():
            optimizer.step()
            optimizer.zero_grad()
        strategy.step_post_backward(params, optimizers, state, step_index, info, packed=False)
        return info

    info = step(0)  # accumulates statistics only
    expected_keys = {
        "radii", "means2d", "depths", "conics", "opacities", "gaussian_ids", "camera_ids", "batch_ids",
        "width", "height", "n_cameras", "n_batches", "tile_size", "tile_width", "tile_height",
        "tiles_per_gauss", "isect_ids", "flatten_ids", "isect_offsets",
    }
    assert expected_keys <= set(info)
    assert info["radii"].dtype == torch.int32 and info["radii"].shape == (2, 300, 2)
    assert state["count"].sum() > 0 and state["grad2d"].sum() > 0

    step(1)  # a refine step: grows the visible Gaussians with gradients, prunes the faint ones
    n_after = len(params["means"])
    assert n_after != 300
    assert (params["opacities"].sigmoid() >= strategy.prune_opa).all()
    assert all(len(param) == n_after for param in params.values())
    for optimizer in optimizers.values():
        assert len(optimizer.state[optimizer.param_groups[0]["params"][0]]["exp_avg"]) == n_after
    step(2)  # the grown set renders and back-propagates


def test_matches_gsplat_torch_rasterize_to_pixels(monkeypatch):
    """gsplat's slow PyTorch compositing, fed our projection and tile intersections.

    On CPU it needs two stand-ins (from gsplat_on_cpu): its CUDA ``rasterize_to_indices_in_range``
    and ``nerfacc``.
    """
    monkeypatch.setattr(_wrapper, "rasterize_to_indices_in_range", rasterize_to_indices_in_range)
    monkeypatch.setitem(sys.modules, "nerfacc", fake_nerfacc())
    scene = make_scene(15, n=300, width=40, height=28, n_cams=2)
    backgrounds = torch.rand(2, 3)
    for mode in ("classic", "antialiased"):
        ours = run(rasterize, scene, backgrounds=backgrounds, rasterize_mode=mode, tile_size=8)
        info = ours.info
        with torch.no_grad():
            render, alphas = _torch_impl._rasterize_to_pixels(
                info["means2d"], info["conics"], scene.colors.expand(2, -1, -1), info["opacities"],
                40, 28, info["tile_size"], info["isect_offsets"], info["flatten_ids"], backgrounds,
            )
        torch.testing.assert_close(ours.render, render, rtol=0, atol=IMAGE_ATOL)
        torch.testing.assert_close(ours.alphas, alphas, rtol=0, atol=IMAGE_ATOL)


def test_rejects_unknown_mode():
    scene = make_scene(16, n=10, width=16, height=16)
    with pytest.raises(ValueError, match="rasterize_mode"):
        rasterize(*scene.params(), scene.viewmats, scene.Ks, 16, 16, rasterize_mode="fancy")
