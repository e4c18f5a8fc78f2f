"""The compiled SSIM (loss and metric on the CPU) against pytorch_msssim, its reference.

Tolerances (float64): the mean SSIM within 1e-6 (pytorch_msssim builds its window in float32,
which moves the value by about 2e-7); gradients within 1e-5 of the largest reference gradient.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from pytorch_msssim import ssim

from splattrain.losses import photometric_loss, ssim_nhwc
from splattrain.kernels import build
from splattrain.kernels.ssim import compiled_ssim, compiled_ssim_applies


@pytest.fixture(autouse=True, scope="module")
def library() -> build.Library:
    try:
        return build.load_library()
    except build.BuildError as error:
        pytest.skip(f"the compiled CPU library cannot be built here: {error}")


def reference(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():  # sides shorter than the window: pytorch_msssim warns it skips the blur
        warnings.simplefilter("ignore", UserWarning)
        return ssim(pred.permute(0, 3, 1, 2), target.permute(0, 3, 1, 2), data_range=1.0, size_average=True)


def images(shape, seed: int, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    target = torch.rand(*shape, generator=g, dtype=dtype)
    pred = (target + 0.1 * torch.randn(*shape, generator=g, dtype=dtype)).clamp(0, 1)
    return pred.requires_grad_(), target


@pytest.mark.parametrize(
    "shape",
    [(1, 128, 128, 3), (2, 40, 33, 3), (1, 20, 9, 3), (1, 8, 30, 1), (1, 5, 5, 2), (3, 11, 11, 4)],
    ids=["demo-size", "batch", "short-width", "short-height", "both-short", "window-sized"],
)
def test_value_and_gradient_match_pytorch_msssim(shape):
    pred, target = images(shape, seed=sum(shape))
    ours, ref = compiled_ssim(pred, target), reference(pred, target)
    assert ours.item() == pytest.approx(ref.item(), abs=1e-6)
    (grad,), (ref_grad,) = torch.autograd.grad(ours, pred), torch.autograd.grad(ref, pred)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-5 * float(ref_grad.abs().max()))


def test_float32_matches_and_gradcheck_in_float64():
    pred, target = images((2, 24, 19, 3), seed=3, dtype=torch.float32)
    ours, ref = compiled_ssim(pred, target), reference(pred, target)
    assert ours.item() == pytest.approx(ref.item(), abs=1e-6)
    (grad,), (ref_grad,) = torch.autograd.grad(ours, pred), torch.autograd.grad(ref, pred)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-4, atol=1e-4 * float(ref_grad.abs().max()))
    pred, target = images((1, 13, 12, 2), seed=4)
    assert torch.autograd.gradcheck(lambda x: compiled_ssim(x, target), (pred,))


def test_results_do_not_depend_on_threads():
    pred, target = images((2, 70, 50, 3), seed=5, dtype=torch.float32)
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            value = compiled_ssim(pred, target)
            results.append((value.detach(), torch.autograd.grad(value, pred)[0]))
    finally:
        torch.set_num_threads(threads)
    for value, grad in results[1:]:
        assert torch.equal(value, results[0][0]) and torch.equal(grad, results[0][1])


def test_when_it_applies(monkeypatch):
    pred, target = images((1, 16, 16, 3), seed=6, dtype=torch.float32)
    assert compiled_ssim_applies(pred, target)
    assert not compiled_ssim_applies(pred, target.clone().requires_grad_())  # no gradient to the target
    assert not compiled_ssim_applies(pred, target[:, :15])
    assert not compiled_ssim_applies(pred.half(), target.half())
    assert not compiled_ssim_applies(pred[0], target[0])
    monkeypatch.setattr(build, "_LOADED", None)  # never compiles from the loss
    assert not compiled_ssim_applies(pred, target)
    assert ssim_nhwc(pred, target).grad_fn is not None  # pytorch_msssim's graph
    assert ssim_nhwc(pred, target).item() == pytest.approx(reference(pred, target).item(), abs=1e-6)


def test_the_loss_uses_it_on_the_cpu():
    pred, target = images((1, 32, 32, 3), seed=7, dtype=torch.float32)
    value = ssim_nhwc(pred, target)
    assert type(value.grad_fn).__name__ == "_SSIMBackward"
    assert value.item() == pytest.approx(reference(pred, target).item(), abs=1e-6)
    losses = photometric_loss(pred, target)
    assert losses["dssim"].item() == pytest.approx(1.0 - value.item(), abs=1e-7)
