"""The large-scene generator: a COLMAP project whose points lie on the surfaces its images show."""

from __future__ import annotations

import numpy as np
from PIL import Image

from cli_check import config_text, run_cli
from splattrain.data.colmap_model import read_model
from splattrain.synthetic.demo_scene import depth_map
from splattrain.synthetic.large_scene import generate_large_scene


def test_points_lie_on_the_surfaces_the_images_show(tmp_path):
    generate_large_scene(tmp_path / "scene", views=4, width=240, height=160, points=4000, noise=0.0)
    model = read_model(tmp_path / "scene" / "sparse" / "0")
    images, points, colors = model.images, model.points, model.colors
    assert len(images) == 4 and points.shape == (4000, 3) and colors.shape == (4000, 3)
    camera = model.cameras[1]
    fx, fy, cx, cy = camera.params
    K = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1.0]])
    image = sorted(images, key=lambda i: i.name)[0]
    viewmat = image.viewmat()
    depth = depth_map(viewmat, K, camera.width, camera.height)
    pixels = np.asarray(Image.open(tmp_path / "scene" / "images" / image.name), dtype=np.float64)
    cam = points @ viewmat[:3, :3].T + viewmat[:3, 3]
    u, v = (cam[:, 0] / cam[:, 2] * fx + cx).astype(int), (cam[:, 1] / cam[:, 2] * fy + cy).astype(int)
    inside = (cam[:, 2] > 0) & (u >= 0) & (u < camera.width) & (v >= 0) & (v < camera.height)
    visible = inside.copy()
    visible[inside] = np.abs(depth[v[inside], u[inside]] - cam[inside, 2]) < 0.02
    assert visible.sum() > 500  # a good share of the cloud is seen, unoccluded, by the first view
    colour_error = np.abs(pixels[v[visible], u[visible]] - colors[visible]).max(axis=1)
    assert np.median(colour_error) < 12  # the point's colour is the image's there (JPEG, texture edges)


def test_the_scene_trains_with_the_colmap_preset(tmp_path):
    generate_large_scene(tmp_path / "scene", views=6, width=64, height=43, points=2000)
    config = tmp_path / "cfg.yaml"
    config.write_text(config_text(tmp_path / "run", steps=3).replace("downscale: 8", "downscale: 1"))
    result = run_cli("fit", "--config", str(config), f"data.path={tmp_path / 'scene'}", "data.type=colmap",
                     "data.test_every=3", "data.background=[0.5,0.5,0.5]")
    assert result.returncode == 0, result.stderr
    assert "gaussians 2,000" in result.stdout.replace("\u2009", ",")
