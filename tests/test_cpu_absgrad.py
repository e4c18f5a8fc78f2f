"""Absolute 2D-mean gradients (``strategy.absgrad``, gsplat's AbsGS option) in the compiled CPU
backend: the sum over pixels of |d loss / d mean| per pixel, as the PyTorch reference computes
it, on every instruction set, through the renderer with and without learned camera poses, and
what ``renderer.type: auto`` now picks for it."""

from __future__ import annotations

from dataclasses import replace
from typing import List

import pytest
import torch

from splattrain.cameras import Camera
from splattrain.model.gaussians import GaussianModel
from splattrain.render import TorchRenderer, build_renderer
from splattrain.render import cpu_rasterizer as cpu, torch_rasterizer
from splattrain.render.cpu_renderer import CpuRenderer
from resume_check import CountAfterStep, make_trainer, single_thread  # noqa: F401
from test_rasterizer import assert_grad_close, make_cameras, make_scene, run


def _absgrad(result) -> torch.Tensor:
    return result.info["means2d"].absgrad


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
@pytest.mark.parametrize("channels", [3, 4, 5])
def test_absgrad_matches_the_torch_backend_on_every_instruction_set(library, mode, channels):
    """3 and 4 channels take the vector kernels, 5 the generic one; the plain gradients stay
    those of the run without absgrad."""
    scene = make_scene(31, n=400, width=45, height=37, n_cams=2, channels=channels)
    backgrounds = torch.rand(2, channels, generator=torch.Generator().manual_seed(5))
    ref = run(torch_rasterizer.rasterize, scene, backgrounds=backgrounds, rasterize_mode=mode, absgrad=True)
    plain = run(cpu.rasterize, scene, backgrounds=backgrounds, rasterize_mode=mode)
    assert not hasattr(plain.info["means2d"], "absgrad") or plain.info["means2d"].absgrad is None
    expected = _absgrad(ref)
    assert (expected > 0).float().mean() > 0.3, "most Gaussians should be seen"
    # |sum| <= sum |.|: the absolute sums bound the gradient itself, strictly where pixels disagree
    assert (expected + 1e-6 >= ref.info["means2d"].grad.abs()).all()
    assert (expected > ref.info["means2d"].grad.abs() * 1.01).any()
    try:
        for name in library.instruction_sets:
            library.use_instruction_set(name)
            ours = run(cpu.rasterize, scene, backgrounds=backgrounds, rasterize_mode=mode, absgrad=True)
            assert_grad_close(_absgrad(ours), expected, f"{name} absgrad")
            assert_grad_close(ours.info["means2d"].grad, plain.info["means2d"].grad, f"{name} means2d")
            for param, grad in plain.grads.items():
                if grad is not None:
                    assert_grad_close(ours.grads[param], grad, f"{name} {param}")
    finally:
        library.use_instruction_set(None)


def test_absgrad_in_float64(library):
    """The baseline build's float64 kernels (used to check gradients) have it too."""
    scene = make_scene(32, n=200, width=30, height=26, n_cams=1)
    scene64 = replace(scene, **{name: getattr(scene, name).double()
                                for name in ("means", "quats", "scales", "opacities", "colors", "viewmats", "Ks")})
    ours = run(cpu.rasterize, scene64, absgrad=True)
    ref = run(torch_rasterizer.rasterize, scene64, absgrad=True)
    assert _absgrad(ours).dtype == torch.float64
    torch.testing.assert_close(_absgrad(ours), _absgrad(ref), rtol=1e-9, atol=1e-12)


def test_each_backward_pass_sets_absgrad_anew(library):
    """A second backward pass through the same render replaces ``absgrad`` (as gsplat does) rather
    than adding to it, while ``grad`` accumulates as PyTorch's gradients do."""
    scene = make_scene(34, n=200, width=30, height=26, n_cams=2)
    leaves = [p.detach().clone().requires_grad_() for p in scene.params()]
    render, alphas, info = cpu.rasterize(*leaves, scene.viewmats, scene.Ks, scene.width, scene.height, absgrad=True)
    info["means2d"].retain_grad()
    loss = (render * render).sum() + alphas.sum()
    loss.backward(retain_graph=True)
    first, grad = info["means2d"].absgrad.clone(), info["means2d"].grad.clone()
    assert first.abs().sum() > 0
    loss.backward()
    assert torch.equal(info["means2d"].absgrad, first)
    torch.testing.assert_close(info["means2d"].grad, 2 * grad)


def _render_with_absgrad(renderer, model: GaussianModel, cameras: List[Camera]):
    for param in model.params.values():
        param.grad = None
    result = renderer.render(model, cameras, 1, torch.tensor([0.2, 0.5, 0.9]))
    result.info["means2d"].retain_grad()
    weights = torch.randn(result.rgb.shape, generator=torch.Generator().manual_seed(3))
    ((result.rgb * weights).sum() + result.alpha.sum()).backward()
    return result.info["means2d"]


def test_renderer_absgrad_matches_torch_renderer_with_and_without_learned_poses(library):
    """Cameras whose poses learn are composited one by one into one means2d tensor: each writes
    its row of absolute gradients into it."""
    gen = torch.Generator().manual_seed(33)
    model = GaussianModel.random(400, torch.zeros(3), 0.8, 1, opacity=0.4, generator=gen)
    viewmats, Ks = make_cameras(2, 40, 30)
    ref = TorchRenderer()
    ref.absgrad = True
    ours = CpuRenderer()
    ours.absgrad = True
    for learn_poses in (False, True):
        cameras = [Camera(viewmat=v.clone().requires_grad_(learn_poses), K=k, width=40, height=30)
                   for v, k in zip(viewmats, Ks)]
        expected = _render_with_absgrad(ref, model, cameras)
        got = _render_with_absgrad(ours, model, cameras)
        assert got.absgrad.shape == (2, 400, 2)
        assert_grad_close(got.absgrad, expected.absgrad, f"absgrad, learned poses {learn_poses}")
        assert_grad_close(got.grad, expected.grad, f"means2d, learned poses {learn_poses}")


def test_auto_keeps_the_compiled_backend_for_absgrad(library):
    messages: List[str] = []
    renderer = build_renderer({"type": "auto"}, torch.device("cpu"), log=messages.append, absgrad=True)
    assert isinstance(renderer, CpuRenderer) and renderer.absgrad and renderer.supports_absgrad
    assert not any("PyTorch renderer" in m for m in messages)


def _counts(tmp_path, kind: str, absgrad: bool, run: str = "") -> List[int]:
    """The Gaussian count after each of 4 steps refining every 2nd step, with ``renderer.type=kind``."""
    overrides = [f"strategy.absgrad={str(absgrad).lower()}", "strategy.refine_start_iter=1", "strategy.refine_every=2",
                 f"renderer.type={kind}"]
    counter = CountAfterStep()
    trainer = make_trainer(tmp_path, f"{kind}-{absgrad}{run}", steps=4, overrides=overrides, hooks=[counter])
    assert isinstance(trainer.renderer, CpuRenderer if kind == "auto" else TorchRenderer)
    trainer.train()
    return counter.counts


def test_absgrad_densification_trains_with_the_compiled_backend(tmp_path, library):
    """``renderer.type: auto`` with ``strategy.absgrad`` trains on the compiled backend, and its
    refinements grow as the PyTorch renderer's do, on every instruction set of this CPU.

    A refinement compares each Gaussian's accumulated gradient with a threshold, and the
    backends' sums differ in the last bits (more so between vector widths), so a Gaussian right
    at the threshold may go either way: the counts agree within 1% (at least one Gaussian), a
    band far narrower than the growth absgrad itself makes."""
    reference = _counts(tmp_path, "torch", absgrad=True)
    without = _counts(tmp_path, "auto", absgrad=False)
    tolerance = [max(1, round(0.01 * count)) for count in reference]
    try:
        for name in library.instruction_sets:
            library.use_instruction_set(name)
            ours = _counts(tmp_path, "auto", absgrad=True, run=name)
            assert ours[-1] > ours[0], name
            assert all(abs(a - b) <= t for a, b, t in zip(ours, reference, tolerance)), (name, ours, reference)
    finally:
        library.use_instruction_set(None)
    # absgrad's sums exceed the plain gradients' norms: it grows well beyond the band above
    assert reference[-1] - without[-1] > 10 * tolerance[-1], (reference, without)
