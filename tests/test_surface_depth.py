"""Median depth, rendered normals and depth distortion from every backend that runs on the CPU
(torch, cpu, gsplat's own Python path with reference kernels), against the dense reference.

Tolerances as in test_gsplat_renderer.py: images within ``atol=1e-5`` (distortion, a difference
of squares, within 1e-4 of its largest value); gradients within ``rtol=1e-4`` plus
``atol=1e-4 * max|reference gradient| + 1e-6``.
"""

from __future__ import annotations

import pytest
import torch

from gsplat_on_cpu import gsplat_on_cpu
from reference_rasterizer import median_depth_reference, pixel_weights, project_reference
from splattrain.render import build_renderer
from splattrain.render.outputs import Wanted, gaussian_normals
from test_gsplat_renderer import make_cameras, make_model

BACKENDS = ("torch", "cpu", "gsplat")
ATOL = 1e-5


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with gsplat_on_cpu():
        yield
    torch.set_num_threads(threads)


def renderer(kind: str, extras=()):
    built = build_renderer({"type": kind}, torch.device("cpu"), gsplat_off_cuda=True)
    built.extra_outputs = extras
    return built


def reference_outputs(model, cameras):
    """Dense per-pixel median depth, composited normals and distortion of ``model``."""
    viewmats = torch.stack([c.viewmat for c in cameras])
    Ks = torch.stack([c.K for c in cameras])
    width, height = cameras[0].width, cameras[0].height
    with torch.no_grad():
        proj = project_reference(model.means, model.quats, model.scales, model.opacities, viewmats, Ks, width, height)
        median = median_depth_reference(proj, width, height)
        normals = gaussian_normals(model.means, model.quats, model.scales, viewmats)
        visible = (proj["depths"] > 0.01) & (proj["depths"] < 1e10)
        out_normals, out_distortion = [], []
        for cam in range(len(cameras)):
            ids, alpha, trans = pixel_weights(proj["means2d"], proj["conics"], proj["opacities"], proj["depths"],
                                              visible, cam, width, height)
            weights = (alpha * trans).double()
            z = proj["depths"][cam, ids].double()
            pairs = weights[:, :, None] * weights[:, None, :] * (z[:, None] - z[None, :]).square()
            out_distortion.append((0.5 * pairs.sum((1, 2))).float().reshape(height, width, 1))
            out_normals.append((weights.float() @ normals[cam, ids]).reshape(height, width, 3))
    return median, torch.stack(out_normals), torch.stack(out_distortion)


@pytest.mark.parametrize("kind", BACKENDS)
def test_median_depth_matches_the_dense_reference(kind):
    model, cameras = make_model(3, n=150), make_cameras(2)
    with torch.no_grad():
        result = renderer(kind).render(model, cameras, model.sh_degree, torch.ones(3), depth="both")
    median, _, _ = reference_outputs(model, cameras)
    assert result.depth is not None and result.median_depth.shape == median.shape
    covered = median > 0
    assert covered.float().mean() > 0.5, "the scene must cover most pixels for the test to mean something"
    torch.testing.assert_close(result.median_depth, median, rtol=0, atol=ATOL)
    # it is a depth of the pixel's own Gaussians, not a blend: it differs from the expected depth
    assert (result.median_depth[covered] - result.depth[covered]).abs().max() > 0.05


@pytest.mark.parametrize("kind", BACKENDS)
def test_depth_choices(kind):
    model, cameras = make_model(4, n=60), make_cameras(1)
    r = renderer(kind)
    with torch.no_grad():
        expected = r.render(model, cameras, model.sh_degree, torch.ones(3), depth=True)
        median = r.render(model, cameras, model.sh_degree, torch.ones(3), depth="median")
        both = r.render(model, cameras, model.sh_degree, torch.ones(3), depth="both")
        none = r.render(model, cameras, model.sh_degree, torch.ones(3), depth=False)
    assert median.depth is None and expected.median_depth is None and none.depth is none.median_depth is None
    torch.testing.assert_close(both.depth, expected.depth, rtol=0, atol=ATOL)
    torch.testing.assert_close(both.median_depth, median.median_depth, rtol=0, atol=ATOL)
    torch.testing.assert_close(none.rgb, both.rgb, rtol=0, atol=ATOL)
    with pytest.raises(ValueError, match="depth='mean'"):
        r.render(model, cameras, model.sh_degree, torch.ones(3), depth="mean")


@pytest.mark.parametrize("kind", BACKENDS)
def test_normals_and_distortion_match_the_dense_reference(kind):
    model, cameras = make_model(5, n=100), make_cameras(2)
    with torch.no_grad():
        result = renderer(kind, ("normals", "distortion")).render(model, cameras, model.sh_degree, torch.ones(3),
                                                                  depth=False)
    _, normals, distortion = reference_outputs(model, cameras)
    assert result.depth is None
    torch.testing.assert_close(result.normals, normals, rtol=0, atol=ATOL)
    assert distortion.max() > 0.01
    torch.testing.assert_close(result.distortion, distortion, rtol=0, atol=1e-4 * float(distortion.max()))


def grads_of_geometry(kind: str, model, cameras, extras):
    for param in model.params.values():
        param.grad = None
    result = renderer(kind, extras).render(model, cameras, model.sh_degree, torch.ones(3), depth=True)
    g = torch.Generator().manual_seed(11)
    loss = sum((getattr(result, name) * torch.randn(getattr(result, name).shape, generator=g)).sum()
               for name in ("rgb", "depth", *extras))
    loss.backward()
    return {name: param.grad.clone() for name, param in model.params.items()}


@pytest.mark.parametrize("kind, extras", [("cpu", ("normals", "distortion")), ("cpu", ("distortion",)),
                                          ("cpu", ("normals",)), ("gsplat", ("normals", "distortion"))])
def test_geometry_gradients_match_torch(kind, extras):
    model, cameras = make_model(6, n=80), make_cameras(2)
    ours = grads_of_geometry(kind, model, cameras, extras)
    reference = grads_of_geometry("torch", model, cameras, extras)
    for name, grad in reference.items():
        atol = 1e-4 * float(grad.abs().max()) + 1e-6
        torch.testing.assert_close(ours[name], grad, rtol=1e-4, atol=atol, msg=lambda m: f"{name}: {m}")


def test_normals_face_the_camera_along_the_thin_axis():
    quats = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    scales = torch.tensor([[0.3, 0.2, 0.01]])  # thin along world z
    viewmat = torch.eye(4)[None]  # camera at the origin looking down +z
    for z in (2.0, -2.0):  # in front of and behind the camera: always towards it
        normal = gaussian_normals(torch.tensor([[0.0, 0.0, z]]), quats, scales, viewmat)[0, 0]
        torch.testing.assert_close(normal, torch.tensor([0.0, 0.0, -1.0 if z > 0 else 1.0]))


def test_bad_outputs_are_refused():
    with pytest.raises(ValueError, match="unknown render output 'curvature'"):
        Wanted.of(True, ["curvature"])
    r = renderer("torch")
    with pytest.raises(ValueError, match="cannot render 'curvature'|unknown"):
        r.extra_outputs = ["curvature"]
