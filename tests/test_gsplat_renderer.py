"""GsplatRenderer on CPU: gsplat's own ``rasterization()`` with its CUDA kernels replaced by gsplat's
PyTorch references (tests/gsplat_on_cpu.py), against the ``torch`` and ``cpu`` backends.

Tolerances: images, alphas and depths within ``atol=1e-5``; gradients within ``rtol=1e-4`` plus
``atol=1e-4 * max|reference gradient| + 1e-6`` (as in test_rasterizer.py).
"""

from __future__ import annotations

import math
from typing import Dict, List

import pytest
import torch

from gsplat_on_cpu import gsplat_on_cpu
from splattrain.cameras import Camera
from splattrain.errors import ConfigError
from splattrain.model.gaussians import GaussianModel, rgb_to_sh
from splattrain.render import build_renderer
from splattrain.render.base import RenderResult

IMAGE_ATOL = 1e-5
PARAMS = ("means", "scales", "quats", "opacities", "sh0", "shN")


@pytest.fixture(autouse=True)
def gsplat_cpu():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with gsplat_on_cpu():
        yield
    torch.set_num_threads(threads)


def look_at(eye: torch.Tensor) -> torch.Tensor:
    forward = -eye / eye.norm()
    right = torch.linalg.cross(forward, torch.tensor([0.0, -1.0, 0.0]))
    right = right / right.norm()
    down = torch.linalg.cross(forward, right)
    viewmat = torch.eye(4)
    viewmat[:3, :3] = torch.stack([right, down, forward])
    viewmat[:3, 3] = -viewmat[:3, :3] @ eye
    return viewmat


def make_model(seed: int, n: int = 120, sh_degree: int = 1) -> GaussianModel:
    g = torch.Generator().manual_seed(seed)
    model = GaussianModel.from_points(torch.randn(n, 3, generator=g) * 0.5, torch.rand(n, 3, generator=g), sh_degree)
    with torch.no_grad():
        model.params["scales"].copy_(torch.log(torch.rand(n, 3, generator=g) * 0.25 + 0.03))
        model.params["quats"].copy_(torch.randn(n, 4, generator=g))
        model.params["opacities"].copy_(torch.logit(torch.rand(n, generator=g) * 0.9 + 0.05))
        model.params["sh0"].copy_(rgb_to_sh(torch.rand(n, 1, 3, generator=g)))
        model.params["shN"].copy_(torch.randn(model.params["shN"].shape, generator=g) * 0.2)
    return model


def make_cameras(n: int, width: int = 32, height: int = 24) -> List[Camera]:
    focal = 0.5 * width / math.tan(math.radians(25.0))
    K = torch.tensor([[focal, 0.0, width / 2.0], [0.0, focal * 1.05, height / 2.0 - 1.3], [0.0, 0.0, 1.0]])
    cameras = []
    for a in torch.linspace(0.0, 0.8, n).tolist():
        eye = torch.tensor([4.0 * math.sin(a), 0.7 * a - 0.3, -4.0 * math.cos(a)])
        cameras.append(Camera(viewmat=look_at(eye), K=K, width=width, height=height, name=f"cam{a:.1f}"))
    return cameras


def render_and_backprop(kind: str, model: GaussianModel, cameras, depth: bool, absgrad: bool = False, **options):
    """Render, back-propagate a fixed random loss over rgb, alpha and depth; (result, grads)."""
    renderer = build_renderer({"type": kind, **options}, torch.device("cpu"), absgrad=absgrad, gsplat_off_cuda=True)
    for param in model.params.values():
        param.grad = None
    background = torch.tensor([0.2, 0.5, 0.9])
    result = renderer.render(model, cameras, sh_degree=model.sh_degree, background=background, depth=depth)
    result.info["means2d"].retain_grad()
    g = torch.Generator().manual_seed(7)
    loss = (result.rgb * torch.randn(result.rgb.shape, generator=g)).sum()
    loss = loss + (result.alpha * torch.randn(result.alpha.shape, generator=g)).sum()
    if depth:
        loss = loss + (result.depth * torch.randn(result.depth.shape, generator=g)).sum() * 0.1
    loss.backward()
    grads = {name: p.grad.to_dense().clone() for name, p in model.params.items() if p.grad is not None}
    return result, grads


def assert_grads_close(ours: Dict[str, torch.Tensor], reference: Dict[str, torch.Tensor]) -> None:
    assert set(ours) == set(reference) == set(PARAMS)
    for name in PARAMS:
        scale = reference[name].abs().max().item()
        torch.testing.assert_close(ours[name], reference[name], rtol=1e-4, atol=1e-4 * scale + 1e-6, msg=name)


def assert_images_close(ours: RenderResult, reference: RenderResult, depth: bool) -> None:
    torch.testing.assert_close(ours.rgb, reference.rgb, rtol=0, atol=IMAGE_ATOL)
    torch.testing.assert_close(ours.alpha, reference.alpha, rtol=0, atol=IMAGE_ATOL)
    if depth:
        covered = reference.alpha > 0.05  # expected depth is a ratio: compare where it is well defined
        torch.testing.assert_close(ours.depth[covered], reference.depth[covered], rtol=1e-4, atol=1e-4)
    else:
        assert ours.depth is None and reference.depth is None


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
@pytest.mark.parametrize("depth", [True, False])
@pytest.mark.parametrize("packed", [False, True])
def test_gsplat_matches_torch_renderer(mode, depth, packed):
    model = make_model(1)
    cameras = make_cameras(2)
    ours, ours_grads = render_and_backprop("gsplat", model, cameras, depth, rasterize_mode=mode, packed=packed)
    ref, ref_grads = render_and_backprop("torch", model, cameras, depth, rasterize_mode=mode)
    assert ours.alpha.amax() > 0.9 and ours.rgb.shape == (2, 24, 32, 3)
    assert_images_close(ours, ref, depth)
    assert_grads_close(ours_grads, ref_grads)
    visible = ref.info["radii"].gt(0).all(-1)  # [C, N]
    if packed:  # one row per visible (camera, Gaussian), in camera-major order
        assert torch.equal(ours.info["camera_ids"] * 10_000 + ours.info["gaussian_ids"],
                           visible.nonzero()[:, 0] * 10_000 + visible.nonzero()[:, 1])
        means2d_grad = torch.zeros(2, 120, 2)
        means2d_grad[ours.info["camera_ids"], ours.info["gaussian_ids"]] = ours.info["means2d"].grad
    else:
        assert torch.equal(ours.info["radii"].gt(0).all(-1), visible)
        means2d_grad = ours.info["means2d"].grad
    scale = ref.info["means2d"].grad.abs().max().item()
    torch.testing.assert_close(means2d_grad, ref.info["means2d"].grad, rtol=1e-4, atol=1e-4 * scale)


def test_gsplat_matches_the_compiled_cpu_renderer():
    model = make_model(2, sh_degree=2)
    cameras = make_cameras(3)
    ours, ours_grads = render_and_backprop("gsplat", model, cameras, depth=True)
    ref, ref_grads = render_and_backprop("cpu", model, cameras, depth=True)
    assert_images_close(ours, ref, depth=True)
    assert_grads_close(ours_grads, ref_grads)


@pytest.mark.parametrize("packed", [False, True])
def test_gsplat_absgrad_matches_torch_renderer(packed):
    model = make_model(3)
    cameras = make_cameras(2)
    ours, _ = render_and_backprop("gsplat", model, cameras, depth=False, absgrad=True, packed=packed)
    ref, _ = render_and_backprop("torch", model, cameras, depth=False, absgrad=True)
    absgrad = ours.info["means2d"].absgrad
    if packed:
        absgrad = torch.zeros(2, 120, 2).index_put((ours.info["camera_ids"], ours.info["gaussian_ids"]), absgrad)
    reference = ref.info["means2d"].absgrad
    assert reference.sum() > 0
    torch.testing.assert_close(absgrad, reference, rtol=1e-4, atol=1e-4 * reference.abs().max().item())
    grad = ours.info["means2d"].grad
    assert (ours.info["means2d"].absgrad >= grad.abs() - 1e-6).all()


def test_sparse_grad_trains_like_packed():
    """gsplat's projection returns sparse gradients with ``sparse_grad``; the renderer hands Adam dense
    ones equal to those of ``packed`` alone."""
    from gsplat import rasterization

    model = make_model(4)
    cameras = make_cameras(1)
    quats = model.quats.detach().clone().requires_grad_()
    viewmats, Ks = cameras[0].viewmat[None], cameras[0].K[None]
    colors, alpha, _ = rasterization(model.means.detach(), quats, model.scales.detach(), model.opacities.detach(),
                                     torch.rand(120, 3), viewmats, Ks, 32, 24, packed=True, sparse_grad=True)
    (colors.sum() + alpha.sum()).backward()
    assert quats.grad.is_sparse and quats.grad.to_dense().abs().sum() > 0

    dense, dense_grads = render_and_backprop("gsplat", model, cameras, depth=False, packed=True)
    sparse, sparse_grads = render_and_backprop("gsplat", model, cameras, depth=False, packed=True, sparse_grad=True)
    torch.testing.assert_close(sparse.rgb, dense.rgb, rtol=0, atol=0)
    assert not any(model.params[name].grad.is_sparse for name in PARAMS)
    for name in PARAMS:
        torch.testing.assert_close(sparse_grads[name], dense_grads[name], rtol=1e-5, atol=1e-7)


def test_gsplat_is_refused_off_cuda_without_the_test_switch():
    with pytest.raises(ConfigError, match="needs a CUDA device"):
        build_renderer({"type": "gsplat"}, torch.device("cpu"))
