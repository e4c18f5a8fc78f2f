"""The compiled CPU rasterizer against the PyTorch backend, its build cache, and its fallback.

Tolerances (float32): images, alphas and depths agree to ``atol=1e-5``; gradients to
``rtol=1e-4`` plus ``atol=1e-4 * max|reference gradient| + 1e-6`` (as in test_rasterizer.py);
projected means, conics, depths and opacities to ``rtol=atol=1e-5``; radii (a ceil) within one
pixel for under 1% of Gaussians; tile binning exactly for the same inputs (without the
ellipse test, which leaves a subset of the entries).
Observed errors are about 1e-6 of the largest gradient. A short training run matches the torch
backend's test PSNR within 0.1 dB. The library comes from the build cache (compiled once,
before the test workers start); the tests skip only when the machine has no C++ compiler (the
fallback test simulates that case everywhere).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from typing import Dict, List, Tuple

import pytest
import torch
from torch import Tensor

from conftest import REPO, tiny_config_text
from splattrain.cameras import Camera
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from splattrain.errors import ConfigError
from splattrain.model.gaussians import GaussianModel
from splattrain.registry import RENDERERS
from splattrain.render import cpu_rasterizer as cpu, projection, torch_rasterizer
from splattrain.kernels import build
from splattrain.kernels import threads as cpu_threads
from splattrain.render.cpu_renderer import CpuRenderer
from splattrain.render import TorchRenderer, build_renderer, sh_colors
from test_rasterizer import PARAM_NAMES, Scene, assert_grad_close, make_cameras, make_scene, run

IMAGE_ATOL = 1e-5
PROJECTION_TOL = 1e-5
PSNR_TOL_DB = 0.1


@pytest.fixture(autouse=True)
def single_thread(library):
    """Tiny scenes: one thread is as fast, and immune to stalls when other processes keep the
    cores busy. (test_results_do_not_depend_on_threads uses two.)"""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def assert_matches_torch(scene: Scene, backgrounds=None, **kwargs):
    """CPU and torch renders, alphas, gradients and info agree; returns the CPU result."""
    ours = run(cpu.rasterize, scene, backgrounds=backgrounds, **kwargs)
    ref = run(torch_rasterizer.rasterize, scene, backgrounds=backgrounds, **kwargs)
    torch.testing.assert_close(ours.render, ref.render, rtol=0, atol=IMAGE_ATOL)
    torch.testing.assert_close(ours.alphas, ref.alphas, rtol=0, atol=IMAGE_ATOL)
    for name in (*PARAM_NAMES, "backgrounds"):
        if ref.grads[name] is not None or ours.grads[name] is not None:
            assert_grad_close(ours.grads[name], ref.grads[name], name)
    assert_info_matches(ours.info, ref.info)
    return ours


def assert_info_matches(ours: dict, ref: dict) -> None:
    assert set(ours) == set(ref)
    for key, value in ref.items():
        if not isinstance(value, Tensor):
            assert ours[key] == value, key
    assert ours["radii"].dtype == torch.int32 and ours["radii"].shape == ref["radii"].shape
    visible = ref["radii"].gt(0).all(-1)
    # A radius is a ceil(): rounding may move one by a pixel, which changes no pixel's colour.
    assert (ours["radii"] - ref["radii"]).abs().max() <= 1
    assert (ours["radii"] != ref["radii"]).any(-1).float().mean() < 0.01
    for key in ("means2d", "depths", "conics", "opacities"):
        torch.testing.assert_close(
            ours[key][visible].detach(), ref[key][visible].detach(), rtol=PROJECTION_TOL, atol=PROJECTION_TOL
        )
    if torch.equal(ours["radii"], ref["radii"]):
        # The CPU lists leave out the tiles of a Gaussian's rectangle its ellipse misses (see
        # test_snug_tiles.py): a subset of the reference's (camera, tile, Gaussian) entries.
        assert (ours["tiles_per_gauss"] <= ref["tiles_per_gauss"]).all()
        pairs = [set((info["isect_ids"] >> 32 << 32 | info["flatten_ids"].long()).tolist()) for info in (ours, ref)]
        assert pairs[0] <= pairs[1]


# -- parity on random scenes ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
@pytest.mark.parametrize("tile_size", [8, 16, 32])
@pytest.mark.parametrize("n_cams, width, height, seed", [(1, 24, 20, 0), (2, 64, 48, 1), (2, 37, 29, 2)])
def test_matches_torch_backend(mode: str, tile_size: int, n_cams: int, width: int, height: int, seed: int):
    scene = make_scene(seed, n=300, width=width, height=height, n_cams=n_cams)
    backgrounds = torch.rand(n_cams, 3, generator=torch.Generator().manual_seed(seed))
    ours = assert_matches_torch(scene, backgrounds, tile_size=tile_size, rasterize_mode=mode)
    assert ours.render.shape == (n_cams, height, width, 3)
    assert 0.05 < ours.alphas.mean() < 0.95, "the scene should be partly covered"


@pytest.mark.parametrize("channels", [1, 4, 5])
def test_per_camera_features_of_any_width(channels: int):
    """[C, N, D] features: D = 4 (RGB + depth) has a compiled fast path, others the generic one."""
    scene = make_scene(3, n=200, width=32, height=24, n_cams=2)
    colors = torch.rand(2, 200, channels, generator=torch.Generator().manual_seed(3))
    ours = assert_matches_torch(replace(scene, colors=colors), torch.rand(2, channels))
    assert ours.render.shape == (2, 24, 32, channels)


def test_saturated_pixels_stop_early():
    """Opaque overlapping Gaussians: most pixels reach the transmittance floor."""
    scene = make_scene(17, n=300, width=40, height=30, n_cams=2, scale_range=(0.1, 0.4))
    scene = replace(scene, opacities=0.9 + 0.1 * scene.opacities)
    ours = assert_matches_torch(scene, torch.rand(2, 3))
    assert (ours.alphas > 1.0 - 1e-3).float().mean() > 0.3, "many pixels should saturate"


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
def test_gradcheck_float64(mode: str):
    """The compiled backward passes against finite differences, independently of the reference."""
    scene = make_scene(18, n=12, width=16, height=12, n_cams=2, scale_range=(0.2, 0.5))
    inputs = [p.double().requires_grad_() for p in scene.params()]
    inputs.append(torch.rand(2, 3, dtype=torch.float64, requires_grad=True))
    viewmats, Ks = scene.viewmats.double(), scene.Ks.double()

    def render(*args: Tensor) -> Tuple[Tensor, Tensor]:
        out = cpu.rasterize(*args[:5], viewmats, Ks, 16, 12, backgrounds=args[5], rasterize_mode=mode)
        return out[0], out[1]

    assert torch.autograd.gradcheck(render, tuple(inputs), eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=True)


def test_tile_binning_is_exactly_the_torch_binning():
    """Same inputs, same isect_ids / flatten_ids / offsets, including ties in depth."""
    gen = torch.Generator().manual_seed(19)
    means2d = torch.rand(2, 500, 2, generator=gen) * torch.tensor([70.0, 50.0]) - 5.0
    radii = torch.randint(0, 12, (2, 500, 2), generator=gen, dtype=torch.int32)
    depths = torch.randint(1, 20, (2, 500), generator=gen).float() * 0.25  # many equal depths
    for tile_size in (8, 16):
        ours = cpu.intersect_tiles(means2d, radii, depths, 61, 45, tile_size)
        ref = projection.intersect_tiles(means2d, radii, depths, 61, 45, tile_size)
        for key in ("tiles_per_gauss", "isect_ids", "flatten_ids", "isect_offsets"):
            assert torch.equal(getattr(ours, key), getattr(ref, key)), key
        assert (ours.tile_width, ours.tile_height) == (ref.tile_width, ref.tile_height)


def test_tile_binning_in_parallel_parts_is_exactly_the_torch_binning():
    """Enough Gaussians for the binning to split its sort and fills into parts on every thread:
    the lists are still exactly the one-thread (and torch) result, ties in depth included."""
    gen = torch.Generator().manual_seed(23)
    n = 40_000  # more than 4 parts of the minimum size
    means2d = torch.rand(1, n, 2, generator=gen) * torch.tensor([260.0, 200.0]) - 5.0
    radii = torch.randint(0, 9, (1, n, 2), generator=gen, dtype=torch.int32)
    depths = torch.randint(1, 200, (1, n), generator=gen).float() * 0.25
    ref = projection.intersect_tiles(means2d, radii, depths, 250, 190, 16)
    threads = torch.get_num_threads()
    try:
        for count in (1, 2, 4):
            torch.set_num_threads(count)
            ours = cpu.intersect_tiles(means2d, radii, depths, 250, 190, 16)
            for key in ("tiles_per_gauss", "isect_ids", "flatten_ids", "isect_offsets"):
                assert torch.equal(getattr(ours, key), getattr(ref, key)), (count, key)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("degree", [0, 1, 2, 3, 4])
def test_sh_colors_match_gsplat_evaluation(library, degree: int):
    """Every instruction set's SH kernels, with a block of Gaussians left over at the end, two
    cameras (gradients summed over both) and coefficients beyond the degree (zero gradients)."""
    gen = torch.Generator().manual_seed(20 + degree)
    model = GaussianModel.random(403, torch.zeros(3), 1.0, 4, generator=gen)
    for param in model.params.values():
        param.data.add_(torch.randn(param.shape, generator=gen) * 0.3)
    viewmats = make_cameras(2, 32, 32)[0]
    weights = torch.randn(2, 403, 3, generator=gen)
    ref_colors, ref_grads = _colors_and_grads(model, lambda: sh_colors(model, viewmats, degree), weights)
    try:
        for name in library.instruction_sets:
            library.use_instruction_set(name)
            colors, grads = _colors_and_grads(
                model, lambda: cpu.sh_colors(model.means, model.params["sh0"], model.params["shN"], viewmats, degree),
                weights,
            )
            torch.testing.assert_close(colors, ref_colors, rtol=0, atol=IMAGE_ATOL, msg=name)
            for param in ("means", "sh0", "shN"):
                assert_grad_close(grads[param], ref_grads[param], f"{name} {param}")
    finally:
        library.use_instruction_set(None)


def _colors_and_grads(model: GaussianModel, fn, weights: Tensor) -> Tuple[Tensor, Dict[str, Tensor]]:
    for param in model.params.values():
        param.grad = None
    colors = fn()
    (colors * weights).sum().backward()
    return colors.detach(), {k: p.grad for k, p in model.params.items()}


# -- edge cases -----------------------------------------------------------------------------


def _with_extra(scene: Scene, means: Tensor, scale: float, opacity: float) -> Scene:
    k = means.shape[0]
    return replace(
        scene,
        means=torch.cat([scene.means, means]),
        quats=torch.cat([scene.quats, torch.randn(k, 4, generator=torch.Generator().manual_seed(k))]),
        scales=torch.cat([scene.scales, torch.full((k, 3), scale)]),
        opacities=torch.cat([scene.opacities, torch.full((k,), opacity)]),
        colors=torch.cat([scene.colors, torch.ones(k, 3)]),
    )


def test_gaussians_behind_the_camera_or_off_screen_contribute_nothing():
    scene = make_scene(6, n=200, width=32, height=24)
    eye, forward = -scene.viewmats[0, :3, :3].T @ scene.viewmats[0, :3, 3], scene.viewmats[0, 2, :3]
    behind = eye + torch.stack([-0.5 * forward, -2.0 * forward + 0.3, 0.005 * forward])
    off = torch.tensor([[6.0, 0.0, 0.0], [0.0, -5.0, 0.0], [-3.0, 3.0, 1.0]])
    ours = assert_matches_torch(_with_extra(_with_extra(scene, behind, 0.5, 0.9), off, 0.05, 0.9))
    assert (ours.info["radii"][:, -6:] == 0).all()
    for name in PARAM_NAMES:
        assert (ours.grads[name][-6:] == 0).all(), name


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
def test_huge_and_tiny_gaussians(mode: str):
    """Gaussians covering the whole image, and sub-pixel ones the eps2d blur dominates."""
    huge = make_scene(8, n=60, width=40, height=28, n_cams=2)
    huge = replace(huge, scales=torch.cat([huge.scales[:-3], torch.full((3, 3), 4.0)]))
    ours = assert_matches_torch(huge, torch.rand(2, 3), rasterize_mode=mode)
    tiles = ours.info["tile_width"] * ours.info["tile_height"]
    assert (ours.info["tiles_per_gauss"][:, -3:] == tiles).all()
    tiny = make_scene(9, n=300, width=40, height=28, n_cams=2, scale_range=(2e-3, 2e-2))
    ours = assert_matches_torch(tiny, torch.rand(2, 3), rasterize_mode=mode)
    assert ours.alphas.max() > (0.1 if mode == "classic" else 0.01)


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
def test_needle_gaussians(mode: str):
    """Long thin Gaussians at every angle: across a tile row their exponent spans far more than
    a float's range, so the kernels evaluate exp(-sigma) afresh on each row instead of stepping
    it from row to row. Mixed with ordinary Gaussians that do step."""
    scene = make_scene(12, n=200, width=48, height=40, n_cams=2)
    needles = torch.tensor([0.6, 0.02, 0.02]).expand(80, 3)
    scene = replace(scene, scales=torch.cat([scene.scales[:120], needles]))
    assert_matches_torch(scene, torch.rand(2, 3), rasterize_mode=mode)


def test_zero_opacity_gaussians_are_culled():
    scene = make_scene(10, n=200, width=32, height=24)
    opacities = scene.opacities.clone()
    opacities[:20] = 0.0
    ours = assert_matches_torch(replace(scene, opacities=opacities))
    assert (ours.info["radii"][:, :20] == 0).all()
    for name in PARAM_NAMES:
        assert (ours.grads[name][:20] == 0).all(), name


@pytest.mark.parametrize("n_cams", [1, 2])
def test_empty_scene_returns_background(n_cams: int):
    scene = make_scene(11, n=0, width=24, height=20, n_cams=n_cams)
    backgrounds = torch.rand(n_cams, 3)
    ours = run(cpu.rasterize, scene, backgrounds=backgrounds)
    torch.testing.assert_close(ours.render, backgrounds[:, None, None, :].expand_as(ours.render))
    assert (ours.alphas == 0).all() and ours.info["flatten_ids"].numel() == 0
    ref = run(torch_rasterizer.rasterize, scene, backgrounds=backgrounds)
    torch.testing.assert_close(ours.grads["backgrounds"], ref.grads["backgrounds"])


def _stack_at_pixel(opacity: float, n: int) -> Scene:
    """``n`` isotropic Gaussians centred on pixel (10, 8), at increasing depths."""
    viewmats, Ks = make_cameras(1, 24, 20)
    K = Ks[0]
    depths = torch.linspace(3.0, 5.0, n)
    cam_xy = (torch.tensor([10.5, 8.5]) - K[:2, 2]) / torch.stack([K[0, 0], K[1, 1]])
    cam_points = torch.cat([cam_xy * depths[:, None], depths[:, None]], dim=-1)
    means = (cam_points - viewmats[0, :3, 3]) @ viewmats[0, :3, :3]
    return Scene(
        means=means, quats=torch.tensor([1.0, 0.0, 0.0, 0.0]).repeat(n, 1), scales=torch.full((n, 3), 0.05),
        opacities=torch.full((n,), opacity), colors=torch.rand(n, 3, generator=torch.Generator().manual_seed(12)),
        viewmats=viewmats, Ks=Ks, width=24, height=20,
    )


def test_transmittance_floor_and_alpha_clamp():
    # alpha 0.5 at the centre: the 14th Gaussian would bring T to 2^-14 <= 1e-4, so 13 contribute.
    ours = assert_matches_torch(_stack_at_pixel(0.5, 30))
    assert ours.alphas[0, 8, 10, 0].item() == 1.0 - 2.0**-13
    # opacity 1 clamps alpha to 0.999; the second Gaussian would leave T = 1e-6, so it is skipped.
    scene = _stack_at_pixel(1.0, 5)
    ours = assert_matches_torch(scene)
    assert ours.alphas[0, 8, 10, 0].item() == pytest.approx(0.999, abs=1e-6)
    torch.testing.assert_close(ours.render[0, 8, 10], 0.999 * scene.colors[0], rtol=0, atol=1e-6)


def test_results_do_not_depend_on_threads():
    scene = make_scene(21, n=400, width=64, height=48, n_cams=2)
    results = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        results.append(run(cpu.rasterize, scene, backgrounds=torch.ones(2, 3)))
    assert torch.equal(results[0].render, results[1].render)
    for name in PARAM_NAMES:
        assert torch.equal(results[0].grads[name], results[1].grads[name]), name


def test_worker_threads_give_the_same_results_as_one_thread(library):
    """The library's loops split work dynamically; every split adds the same numbers in the same order."""
    scene = make_scene(21, n=400, width=64, height=48, n_cams=2)
    previous = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2, 1):
            torch.set_num_threads(threads)
            results.append(run(cpu.rasterize, scene, backgrounds=torch.ones(2, 3)))
    finally:
        torch.set_num_threads(previous)
    for other in results[1:]:
        assert torch.equal(results[0].render, other.render)
        for name in PARAM_NAMES:
            assert torch.equal(results[0].grads[name], other.grads[name]), name


def test_training_gives_the_library_the_threads_and_pytorch_one(library):
    """While training runs, PyTorch's own operations get one thread and the library's loops the
    process's count; both are restored afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        renderer = CpuRenderer()
        with renderer.training_threads() as threads:
            assert (threads, torch.get_num_threads(), cpu_threads.loop_threads()) == (2, 1, 2)
            with renderer.training_threads():  # nested: keeps the split
                assert (torch.get_num_threads(), cpu_threads.loop_threads()) == (1, 2)
            assert (torch.get_num_threads(), cpu_threads.loop_threads()) == (1, 2)
        assert (torch.get_num_threads(), cpu_threads.loop_threads()) == (2, 2)
        with renderer.training_threads():
            cpu_threads.set_loop_threads(3)
            assert (torch.get_num_threads(), cpu_threads.loop_threads()) == (1, 3)
            other = []  # another thread has a split of its own (as PyTorch's count is the thread's own)
            worker = threading.Thread(target=lambda: other.append((cpu_threads.loop_threads(), torch.get_num_threads())))
            worker.start()
            worker.join()
            assert other[0][0] == other[0][1] != 3
        torch.set_num_threads(1)
        assert cpu_threads.loop_threads() == 1  # outside training the library follows PyTorch
        with pytest.raises(RuntimeError):
            cpu_threads.set_loop_threads(2)
    finally:
        torch.set_num_threads(previous)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks the process")
def test_a_forked_child_runs_parallel_loops(library):
    """A child forked after the workers started has none of them (and may inherit a held lock):
    it gets a fresh pool and its renders equal the parent's."""
    scene = make_scene(5, n=300, width=48, height=32, n_cams=1)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        parent = run(cpu.rasterize, scene).render
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: render, report, exit without running the parent's clean-up
            try:
                same = torch.equal(run(cpu.rasterize, scene).render, parent)
                os.write(write, b"1" if same else b"0")
            finally:
                os._exit(0)
        os.close(write)
        deadline = time.monotonic() + 60
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                pytest.fail("the forked child hung")
            time.sleep(0.05)
        assert os.read(read, 1) == b"1"
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("channels", [3, 4])
def test_every_instruction_set_matches_the_torch_backend(library, channels: int):
    """The projection and compositing kernels are built per instruction set (baseline, AVX2,
    AVX-512); each one this CPU runs matches the reference, so a machine without AVX-512 is
    covered too (300 Gaussians: the last vector block is partly filled)."""
    assert library.instruction_sets[0] == "baseline"
    scene = make_scene(22, n=300, width=40, height=36, n_cams=2, channels=channels)
    try:
        for name in library.instruction_sets:
            library.use_instruction_set(name)
            assert_matches_torch(scene, torch.rand(2, channels, generator=torch.Generator().manual_seed(1)))
    finally:
        library.use_instruction_set(None)
    with pytest.raises(ValueError, match="sse9"):
        library.use_instruction_set("sse9")


def test_the_environment_picks_the_instruction_set(library, monkeypatch):
    """``SPLATTRAIN_ISA`` is the default a reset returns to: the same bits as picking that set,
    so the whole suite can run each path on one machine; a set this CPU lacks is refused."""
    scene = make_scene(25, n=200, width=30, height=26, n_cams=1)
    try:
        for name in library.instruction_sets:
            library.use_instruction_set(name)
            picked = run(cpu.rasterize, scene)
            monkeypatch.setenv("SPLATTRAIN_ISA", name)
            library.use_instruction_set(None)
            by_default = run(cpu.rasterize, scene)
            assert torch.equal(by_default.render, picked.render), name
            for param in PARAM_NAMES:
                assert torch.equal(by_default.grads[param], picked.grads[param]), (name, param)
        monkeypatch.setenv("SPLATTRAIN_ISA", "sse9")
        with pytest.raises(ValueError, match="sse9"):
            library.use_instruction_set(None)
    finally:
        monkeypatch.delenv("SPLATTRAIN_ISA")
        library.use_instruction_set(None)


@pytest.mark.parametrize("channels", [3, 4])
def test_fixed_backgrounds_are_composited_in_the_kernels(library, channels: int):
    """A background without a gradient (the trainer's) is blended in the compositing kernels
    themselves, forward and backward, for every instruction set; one that learns is blended by
    PyTorch (the tests above)."""
    scene = make_scene(24, n=300, width=40, height=36, n_cams=2, channels=channels)
    backgrounds = torch.rand(2, channels, generator=torch.Generator().manual_seed(2))
    ref = run(torch_rasterizer.rasterize, scene, backgrounds=backgrounds, learn_background=False)
    try:
        for name in library.instruction_sets:
            library.use_instruction_set(name)
            ours = run(cpu.rasterize, scene, backgrounds=backgrounds, learn_background=False)
            torch.testing.assert_close(ours.render, ref.render, rtol=0, atol=IMAGE_ATOL, msg=name)
            torch.testing.assert_close(ours.alphas, ref.alphas, rtol=0, atol=IMAGE_ATOL, msg=name)
            for param in PARAM_NAMES:
                assert_grad_close(ours.grads[param], ref.grads[param], f"{name} {param}")
    finally:
        library.use_instruction_set(None)


def test_rejects_unsupported_inputs():
    scene = make_scene(16, n=10, width=16, height=16)
    with pytest.raises(ValueError, match="rasterize_mode"):
        cpu.rasterize(*scene.params(), scene.viewmats, scene.Ks, 16, 16, rasterize_mode="fancy")
    with pytest.raises(ValueError, match="float32 and float64"):
        cpu.rasterize(*(p.half() for p in scene.params()), scene.viewmats, scene.Ks, 16, 16)


# -- the renderer ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
def test_renderer_matches_torch_renderer(mode: str):
    """RGB, alpha, depth, info and every parameter's gradient of the two renderer classes."""
    gen = torch.Generator().manual_seed(22)
    model = GaussianModel.random(500, torch.zeros(3), 0.8, 3, opacity=0.4, generator=gen)
    for param in model.params.values():
        param.data.add_(torch.randn(param.shape, generator=gen) * 0.1)
    viewmats, Ks = make_cameras(2, 40, 30)
    cameras = [Camera(viewmat=v, K=k, width=40, height=30) for v, k in zip(viewmats, Ks)]
    outputs = []
    for renderer in (CpuRenderer(rasterize_mode=mode), TorchRenderer(rasterize_mode=mode)):
        for param in model.params.values():
            param.grad = None
        result = renderer.render(model, cameras, 2, torch.tensor([0.2, 0.5, 0.9]))
        loss = (result.rgb * torch.randn(result.rgb.shape, generator=torch.Generator().manual_seed(1))).sum()
        (loss + result.alpha.sum() + (result.depth * result.alpha).mean()).backward()
        outputs.append((result, {k: p.grad.clone() for k, p in model.params.items()}))
    (ours, our_grads), (ref, ref_grads) = outputs
    for key in ("rgb", "alpha"):
        torch.testing.assert_close(getattr(ours, key).detach(), getattr(ref, key).detach(), rtol=0, atol=IMAGE_ATOL)
    covered = ref.alpha > 0.05
    torch.testing.assert_close(ours.depth[covered].detach(), ref.depth[covered].detach(), rtol=1e-5, atol=1e-4)
    assert_info_matches(ours.info, ref.info)
    for name in model.params:
        assert_grad_close(our_grads[name], ref_grads[name], name)


@pytest.mark.parametrize("renderer_type", ["cpu", "torch"])
def test_training_renders_without_depth_give_the_same_colours(renderer_type: str):
    """depth=False (training steps) leaves depth None and changes neither colours, alpha nor gradients."""
    gen = torch.Generator().manual_seed(23)
    model = GaussianModel.random(300, torch.zeros(3), 0.8, 3, opacity=0.4, generator=gen)
    viewmats, Ks = make_cameras(1, 40, 30)
    cameras = [Camera(viewmat=viewmats[0], K=Ks[0], width=40, height=30)]
    weights = torch.randn(1, 30, 40, 3, generator=gen)
    renderer = RENDERERS.build({"type": renderer_type})
    results = []
    for depth in (True, False):
        for param in model.params.values():
            param.grad = None
        result = renderer.render(model, cameras, 1, torch.tensor([0.2, 0.5, 0.9]), depth=depth)
        ((result.rgb * weights).sum() + result.alpha.sum()).backward()
        results.append((result, {k: p.grad.clone() for k, p in model.params.items()}))
    (with_depth, grads), (without, grads_without) = results
    assert with_depth.depth is not None and without.depth is None
    for key in ("rgb", "alpha"):
        torch.testing.assert_close(getattr(without, key), getattr(with_depth, key), rtol=0, atol=1e-6)
    for name in model.params:
        assert_grad_close(grads_without[name], grads[name], name)


def test_auto_prefers_cpu_and_explicit_cpu_builds():
    assert isinstance(build_renderer({"type": "auto"}, torch.device("cpu")), CpuRenderer)
    assert isinstance(build_renderer({"type": "cpu", "tile_size": 8}, torch.device("cpu")), CpuRenderer)
    assert "cpu" in RENDERERS


def test_missing_compiler_falls_back_with_one_warning(monkeypatch, tmp_path):
    """No compiler and an empty cache: auto warns once and uses torch; explicit cpu is a user error."""
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("SPLATTRAIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "_LOADED", None)
    monkeypatch.setattr(build, "_FAILED", None)
    warnings: List[str] = []
    for _ in range(2):
        warnings.clear()
        renderer = build_renderer({"type": "auto"}, torch.device("cpu"), warn=warnings.append)
        assert isinstance(renderer, TorchRenderer)
        assert len(warnings) == 1 and "no-such-compiler" in warnings[0] and "PyTorch renderer" in warnings[0]
    with pytest.raises(ConfigError, match="renderer.type 'cpu'.*no-such-compiler"):
        build_renderer({"type": "cpu"}, torch.device("cpu"))
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.so"))

    # The trainer shows that warning once and trains with the PyTorch renderer.
    config = tmp_path / "cfg.yaml"
    config.write_text(tiny_config_text(tmp_path, steps=2))
    console = Console(quiet=True)
    shown: List[str] = []
    monkeypatch.setattr(console, "warning", lambda message, once=None: shown.append(message))
    trainer = DefaultTrainer(load_config(config), console=console)
    assert isinstance(trainer.renderer, TorchRenderer)
    assert sum("PyTorch renderer" in m for m in shown) == 1


def test_second_process_loads_the_cached_build(library):
    """A fresh process finds the library in the cache: it does not compile, the file is untouched."""
    mtime = library.path.stat().st_mtime_ns
    code = "from splattrain.kernels import load_library as l; lib = l(print); print(lib.built, lib.path)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.split() == ["False", str(library.path)], done.stdout
    assert "compiling" not in done.stdout
    assert library.path.stat().st_mtime_ns == mtime


def test_short_training_run_reaches_the_same_psnr(tmp_path):
    """The tiny demo config trained with each backend ends within PSNR_TOL_DB of the other."""
    psnr = {}
    for name in ("torch", "cpu"):
        config = tmp_path / f"{name}.yaml"
        config.write_text(tiny_config_text(tmp_path / name, steps=150))
        cfg = load_config(config, [f"renderer.type={name}", "trainer.val_interval=150"])
        trainer = DefaultTrainer(cfg, console=Console(quiet=True))
        psnr[name] = trainer.train()["psnr"]
    assert psnr["cpu"] > 15.0, psnr
    assert abs(psnr["cpu"] - psnr["torch"]) < PSNR_TOL_DB, psnr
