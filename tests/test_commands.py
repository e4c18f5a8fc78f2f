"""eval, render and export on a tiny trained scene; PLY round trips and PLY initialisation."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import tiny_config_text
from splattrain.checkpoints.files import load_checkpoint_file, save_checkpoint_file
from splattrain.commands.evaluate import evaluate
from splattrain.commands.export import export
from splattrain.commands.render import render
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from splattrain.io.ply import read_ply_gaussians
from splattrain.model.transform import transform_gaussians


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trained")
    (tmp / "cfg.yaml").write_text(tiny_config_text(tmp, steps=40))
    trainer = DefaultTrainer(load_config(tmp / "cfg.yaml", ["model.sh_degree=3", "model.sh_degree_interval=10"]),
                             console=Console(quiet=True))
    results = trainer.train()
    return trainer, results


def test_eval_reproduces_reported_metrics(trained, tmp_path):
    trainer, results = trained
    report = evaluate(trainer.run_dir, Console(quiet=True), out=tmp_path, save_renders=True, lpips=False)
    assert report["step"] == 40 and report["psnr"] == pytest.approx(results["psnr"], abs=1e-6)
    assert report["ssim"] == pytest.approx(results["ssim"], abs=1e-6)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert [v["view"] for v in saved["per_view"]] == [f.name for f in trainer.data.test_frames]
    assert len(list((tmp_path / "renders").glob("*.png"))) == len(trainer.data.test_frames)


@pytest.mark.parametrize("path, frames", [("test", None), ("orbit", 8)])
def test_render_writes_promised_frames(trained, tmp_path, path, frames):
    trainer, _ = trained
    result = render(trainer.run_dir / "ckpt" / "last.pt", Console(quiet=True), path=path, out=tmp_path, frames=frames or 60)
    expected = len(trainer.data.test_frames) if path == "test" else 8
    pngs = sorted((tmp_path / "frames").glob("frame_*.png"))
    assert result["frames"] == expected and len(pngs) == expected
    assert np.asarray(Image.open(pngs[0])).shape == (32, 32, 3)
    gif = Image.open(tmp_path / "render.gif")
    assert gif.n_frames == expected


def test_render_test_path_matches_eval_renders(trained, tmp_path):
    trainer, _ = trained
    render(trainer.run_dir, Console(quiet=True), path="test", out=tmp_path / "r")
    evaluate(trainer.run_dir, Console(quiet=True), out=tmp_path / "e", save_renders=True, lpips=False)
    first = trainer.data.test_frames[0].name
    a = np.asarray(Image.open(tmp_path / "r" / "frames" / "frame_0000.png"))
    b = np.asarray(Image.open(tmp_path / "e" / "renders" / f"{first}.png"))
    assert np.array_equal(a, b)


@pytest.mark.parametrize("mode", ["median", "expected"])
def test_render_writes_depth_maps(trained, tmp_path, mode):
    from splattrain.io.depth_maps import SCALE_KEY, read_depth_png

    trainer, _ = trained
    render(trainer.run_dir, Console(quiet=True), path="test", out=tmp_path, depth=mode)
    camera = trainer.data.test_frames[0].camera
    with torch.no_grad():
        result = trainer.renderer.render(trainer.model, [camera], trainer.model.sh_degree, trainer.background, depth=mode)
    depth = (result.median_depth if mode == "median" else result.depth)[0, ..., 0].numpy()
    covered = result.alpha[0, ..., 0].numpy() >= 0.5
    assert covered.mean() > 0.2
    saved = np.load(tmp_path / "depth" / "frame_0000.npy")
    assert saved.dtype == np.float32
    np.testing.assert_allclose(saved[covered], depth[covered], rtol=1e-6)
    assert (saved[~covered] == 0).all()
    png = Image.open(tmp_path / "depth" / "frame_0000.png")
    assert png.mode.startswith("I") and np.asarray(png).max() == 65535  # 16 bits, the farthest at the top
    scale = json.loads((tmp_path / "depth" / "depth_scale.json").read_text())["units_per_level"]["frame_0000.png"]
    assert float(png.text[SCALE_KEY]) == scale
    np.testing.assert_allclose(read_depth_png(tmp_path / "depth" / "frame_0000.png"), saved, atol=scale * 0.51)
    preview = np.asarray(Image.open(tmp_path / "depth" / "frame_0000_preview.png"))
    assert preview.shape == saved.shape + (3,) and (preview[~covered] == 0).all() and preview[covered].any()
    assert len(list((tmp_path / "depth").glob("frame_*_preview.png"))) == len(trainer.data.test_frames)


def test_render_refuses_an_unknown_depth(trained, tmp_path):
    from splattrain.errors import UserError

    with pytest.raises(UserError, match="--depth 'mean'"):
        render(trained[0].run_dir, Console(quiet=True), out=tmp_path, depth="mean")


def test_export_ply_round_trips_exactly_and_splat_layout(trained, tmp_path):
    trainer, _ = trained
    ply = export(trainer.run_dir, Console(quiet=True), fmt="ply", out=tmp_path / "scene.ply")
    params, degree = read_ply_gaussians(ply)
    assert degree == 3
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(params[key], value), key
    splat = export(trainer.run_dir, Console(quiet=True), fmt="splat", out=tmp_path / "scene.splat")
    raw = splat.read_bytes()
    n = trainer.model.num_gaussians
    assert len(raw) == 32 * n
    records = np.frombuffer(raw, dtype=[("pos", "<f4", 3), ("scale", "<f4", 3), ("rgba", "u1", 4), ("rot", "u1", 4)])
    importance = records["scale"].prod(axis=1) * records["rgba"][:, 3]
    assert importance[0] >= importance[-1]
    means = trainer.model.means.detach().numpy()
    assert {tuple(p) for p in records["pos"]} == {tuple(p) for p in means}


def test_export_original_frame_undoes_world_transform(trained, tmp_path):
    trainer, _ = trained
    checkpoint = load_checkpoint_file(trainer.run_dir / "ckpt" / "last.pt")
    rotation = torch.tensor([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    transform = torch.eye(4, dtype=torch.float64)
    transform[:3, :3] = 0.5 * rotation.double()
    transform[:3, 3] = torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64)
    original = trainer.model.state_dict()
    checkpoint["gaussians"] = transform_gaussians(original, transform)  # as if trained in a normalised frame
    checkpoint["world_transform"] = transform
    save_checkpoint_file(checkpoint, tmp_path / "normalized.pt")
    path = export(tmp_path / "normalized.pt", Console(quiet=True), out=tmp_path / "orig.ply", world_frame="original")
    params, _ = read_ply_gaussians(path)
    for key in ("means", "scales", "opacities", "sh0", "shN"):
        assert torch.allclose(params[key], original[key], atol=2e-5), key
    assert torch.allclose(params["quats"], original["quats"], atol=2e-5)


def write_reference_ply(path, n=7, degree=3, seed=0):
    """A PLY as the original 3DGS code writes it, built field by field with numpy."""
    rng = np.random.default_rng(seed)
    n_rest = 3 * ((degree + 1) ** 2 - 1)
    names = ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
    names += [f"f_rest_{i}" for i in range(n_rest)] + ["opacity", "scale_0", "scale_1", "scale_2"]
    names += ["rot_0", "rot_1", "rot_2", "rot_3"]
    data = rng.normal(size=(n, len(names))).astype(np.float32)
    data[:, 3:6] = 0
    vertex = np.empty(n, dtype=[(name, "f4") for name in names])
    for i, name in enumerate(names):
        vertex[name] = data[:, i]
    header = "ply\nformat binary_little_endian 1.0\nelement vertex %d\n" % n
    header += "".join(f"property float {name}\n" for name in names) + "end_header\n"
    path.write_bytes(header.encode() + vertex.tobytes())
    return {name: data[:, i] for i, name in enumerate(names)}


def test_reference_ply_loads_as_initialisation(tmp_path):
    columns = write_reference_ply(tmp_path / "ref.ply")
    params, degree = read_ply_gaussians(tmp_path / "ref.ply")
    assert degree == 3
    np.testing.assert_array_equal(params["means"][:, 2].numpy(), columns["z"])
    np.testing.assert_array_equal(params["shN"][:, 0, 0].numpy(), columns["f_rest_0"])  # channel-major
    np.testing.assert_array_equal(params["shN"][:, 0, 1].numpy(), columns["f_rest_15"])
    np.testing.assert_array_equal(params["shN"][:, 14, 2].numpy(), columns["f_rest_44"])
    np.testing.assert_array_equal(params["quats"][:, 0].numpy(), columns["rot_0"])
    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=2))
    cfg = load_config(tmp_path / "cfg.yaml", [f"model.init.ply={tmp_path / 'ref.ply'}", "model.sh_degree=3"])
    trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    assert trainer.model.num_gaussians == 7
    np.testing.assert_array_equal(trainer.model.params["opacities"].detach().numpy(), columns["opacity"])


def test_ply_of_lower_degree_is_padded_and_higher_degree_refused(tmp_path):
    write_reference_ply(tmp_path / "d1.ply", degree=1)
    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=2))
    cfg = load_config(tmp_path / "cfg.yaml", [f"model.init.ply={tmp_path / 'd1.ply'}", "model.sh_degree=2"])
    model = DefaultTrainer(cfg, console=Console(quiet=True)).model
    assert model.params["shN"].shape == (7, 8, 3) and not model.params["shN"][:, 3:].any()
    write_reference_ply(tmp_path / "d3.ply", degree=3)
    from splattrain.errors import ConfigError

    cfg = load_config(tmp_path / "cfg.yaml", [f"model.init.ply={tmp_path / 'd3.ply'}", "model.sh_degree=1"])
    with pytest.raises(ConfigError, match="SH degree 3"):
        DefaultTrainer(cfg, console=Console(quiet=True))
