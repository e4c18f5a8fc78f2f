"""Every export format: SPZ bytes against the format description, round trips rendered, initialisation."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pytest
import torch

from conftest import tiny_config_text
from splattrain.commands.export import export
from splattrain.commands.snapshot import load_snapshot
from splattrain.config import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from splattrain.errors import DataError, UserError
from splattrain.io.gaussians_file import read_gaussians_file, read_gaussians_file_full
from splattrain.io.spz import decode_spz, encode_spz
from splattrain.metrics import psnr
from splattrain.model.gaussians import GaussianModel

#: Worst PSNR (dB) of a read-back render against the original one, per lossy format.
PSNR_BOUNDS = {"spz": 45.0, "ply-compressed": 38.0, "splat": 45.0}


def two_gaussians() -> dict:
    """Two Gaussians of SH degree 1 whose SPZ encoding is worked out by hand below."""
    return {
        "means": torch.tensor([[1.0, -0.5, 2.25], [-0.25, 0.0, 0.0]]),
        "scales": torch.tensor([[-2.0, 0.0, 1.0], [-12.0, 6.0, -10.0]]),
        "quats": torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, -0.5, 0.5]]),
        "opacities": torch.tensor([0.0, 20.0]),
        "sh0": torch.tensor([[[0.0, 1.0, -1.0]], [[2.0, -4.0, 0.5]]]),
        "shN": torch.tensor([[[0.5, 0.0, 0.0], [0.1, 0.0, 0.0], [0.25, 0.0, 0.0]], torch.zeros(3, 3).tolist()]),
    }


def expected_spz_bytes() -> bytes:
    """The SPZ v3 payload of two_gaussians(), derived by hand from the format's reference code.

    Right-down-forward to right-up-back flips y and z (positions, quaternion y/z, SH signs
    -1, -1, +1 for the three degree-1 coefficients).
    """
    header = bytes.fromhex("4e475350" "03000000" "02000000") + bytes([1, 12, 1, 0])  # degree 1, 12 bits, antialiased
    # (1, 0.5, -2.25) * 4096 = (4096, 2048, -9216); (-0.25, 0, 0) * 4096 = (-1024, 0, 0); 24-bit LE.
    positions = bytes.fromhex("001000" "000800" "00dcff" "00fcff" "000000" "000000")
    alphas = bytes([128, 255])  # sigmoid(0) * 255 = 127.5 rounds away from zero; sigmoid(20) * 255 -> 255
    # sh0 * 0.15 * 255 + 127.5: 0 -> 128, 1 -> 165.75 -> 166, -1 -> 89.25 -> 89; 2 -> 204, -4 -> 0, 0.5 -> 147
    colors = bytes([128, 166, 89, 204, 0, 147])
    scales = bytes([128, 160, 176, 0, 255, 0])  # (log scale + 10) * 16, clamped to 0..255
    # identity: xyzw (0, 0, 0, 1), largest index 3, three zero magnitudes -> 3 << 30.
    # (w, x, y, z) = (.5, .5, -.5, .5) -> xyzw (.5, -.5, .5, .5) -> flipped (.5, .5, -.5, .5): largest index 0,
    # magnitudes round(511 * .5 / sqrt(.5)) = 361, sign bits 0, 1, 0 -> ((361 << 10 | 512 | 361) << 10) | 361.
    rotations = bytes.fromhex("000000c0") + (((361 << 10 | 512 | 361) << 10) | 361).to_bytes(4, "little")
    # degree 1 (5 bits, bucket 8): -0.5 -> 64, 0 -> 128, -0.1 -> 115 -> 112, 0.25 -> 160; coefficient major.
    sh = bytes([64, 128, 128, 112, 128, 128, 160, 128, 128]) + bytes([128] * 9)
    return header + positions + alphas + colors + scales + rotations + sh


def test_spz_encoding_matches_the_format_byte_for_byte():
    assert encode_spz(two_gaussians(), antialiased=True) == expected_spz_bytes()
    plain = encode_spz(two_gaussians(), antialiased=False)
    assert plain[14] == 0 and plain[15:] == expected_spz_bytes()[15:]


def test_spz_decoding_follows_the_format():
    params, degree, antialiased = decode_spz(expected_spz_bytes())
    assert degree == 1 and antialiased
    np.testing.assert_allclose(params["means"].numpy(), [[1.0, -0.5, 2.25], [-0.25, 0.0, 0.0]])
    np.testing.assert_allclose(params["scales"].numpy(), [[-2.0, 0.0, 1.0], [-10.0, 5.9375, -10.0]])
    np.testing.assert_allclose(params["sh0"][0, 0].numpy(), [(128 / 255 - 0.5) / 0.15, (166 / 255 - 0.5) / 0.15,
                                                             (89 / 255 - 0.5) / 0.15], atol=1e-6)
    np.testing.assert_allclose(params["shN"][0, :, 0].numpy(), [0.5, 0.125, 0.25])  # signs flipped back
    np.testing.assert_allclose(torch.sigmoid(params["opacities"]).numpy(), [128 / 255, 1.0], atol=1e-5)
    quats = torch.nn.functional.normalize(params["quats"], dim=-1)
    assert torch.allclose(quats[0], torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert torch.allclose(quats[1], torch.tensor([0.5, 0.5, -0.5, 0.5]), atol=2e-3)


def test_spz_reader_rejects_other_files(tmp_path):
    (tmp_path / "bad.spz").write_bytes(gzip.compress(b"NOPE" + bytes(40)))
    with pytest.raises(DataError, match="bad magic"):
        read_gaussians_file(tmp_path / "bad.spz")
    (tmp_path / "short.spz").write_bytes(gzip.compress(expected_spz_bytes()[:40]))
    with pytest.raises(DataError, match="truncated"):
        read_gaussians_file(tmp_path / "short.spz")
    (tmp_path / "x.bin").write_bytes(b"hello")
    with pytest.raises(DataError, match="not a PLY"):
        read_gaussians_file(tmp_path / "x.bin")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny demo-scene run with SH degree 3 and the antialiased rasterizer, 60 steps."""
    tmp = tmp_path_factory.mktemp("formats")
    (tmp / "cfg.yaml").write_text(tiny_config_text(tmp, steps=60))
    overrides = ["model.sh_degree=3", "model.sh_degree_interval=10", "renderer.rasterize_mode=antialiased",
                 "model.init.num_points=700"]
    trainer = DefaultTrainer(load_config(tmp / "cfg.yaml", overrides), console=Console(quiet=True))
    trainer.train()
    return trainer


def render_views(snapshot, params, degree):
    """The test views of ``snapshot``'s run rendered from ``params`` (its own renderer, SH ``degree``)."""
    model = GaussianModel({k: v.clone() for k, v in params.items()}, degree)
    renderer = snapshot.renderer()
    images = []
    with torch.no_grad():
        for batch in snapshot.views("test").test_batches():
            images.append(renderer.render(model, batch["camera"], degree, snapshot.background, depth=False).rgb)
    return torch.cat(images)


@pytest.mark.parametrize("fmt", ["ply", "spz", "ply-compressed", "splat"])
def test_export_round_trip_renders_like_the_original(trained, tmp_path, fmt):
    snapshot = load_snapshot(trained.run_dir, "cpu")
    path = export(trained.run_dir, Console(quiet=True), fmt=fmt, out=tmp_path / f"scene.{fmt}", world_frame="normalized")
    scene = read_gaussians_file_full(path)
    original = snapshot.model.state_dict()
    reference = render_views(snapshot, original, 3)
    if fmt == "ply":
        assert scene.sh_degree == 3 and scene.antialiased
        for key, value in original.items():
            assert torch.equal(scene.params[key], value), key
        assert torch.equal(render_views(snapshot, scene.params, 3), reference)
        return
    degree = 0 if fmt == "splat" else 3
    assert scene.sh_degree == degree and scene.antialiased == (fmt != "splat")
    if fmt == "splat":  # base colour only: compare with the original rendered at degree 0
        reference = render_views(snapshot, original, 0)
    value = psnr(render_views(snapshot, scene.params, degree), reference)
    assert value >= PSNR_BOUNDS[fmt], f"{fmt}: {value:.2f} dB"


def test_export_sh_degree_and_format_errors(trained, tmp_path):
    path = export(trained.run_dir, Console(quiet=True), fmt="spz", out=tmp_path / "d1.spz", sh_degree=1)
    params, degree = read_gaussians_file(path)
    assert degree == 1 and params["shN"].shape[1] == 3
    with pytest.raises(UserError, match="sh-degree 4"):
        export(trained.run_dir, Console(quiet=True), fmt="ply", out=tmp_path / "x.ply", sh_degree=4)
    with pytest.raises(UserError, match="format 'obj'"):
        export(trained.run_dir, Console(quiet=True), fmt="obj", out=tmp_path / "x.obj")


@pytest.mark.parametrize("fmt", ["spz", "ply-compressed"])
def test_a_compressed_scene_initialises_a_run(trained, tmp_path, fmt):
    path = export(trained.run_dir, Console(quiet=True), fmt=fmt, out=tmp_path / f"init.{fmt}", world_frame="normalized")
    expected, _ = read_gaussians_file(path)
    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=2))
    cfg = load_config(tmp_path / "cfg.yaml", [f"model.init.ply={path}", "model.sh_degree=3"])
    trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    for key in ("means", "scales", "sh0", "shN"):
        assert torch.equal(trainer.model.params[key].detach(), expected[key]), key
    results = trainer.train()
    assert math.isfinite(results["psnr"]) and results["num_gaussians"] > 0


def test_compressed_ply_rotations_for_every_largest_component(tmp_path):
    quats = torch.tensor([[0.9, 0.1, -0.3, 0.2], [0.1, -0.9, 0.3, 0.2], [-0.2, 0.1, 0.9, 0.3], [0.3, 0.2, -0.1, -0.9]])
    n = len(quats)
    params = {"means": torch.arange(3 * n, dtype=torch.float32).reshape(n, 3), "scales": torch.full((n, 3), -2.0),
              "quats": quats, "opacities": torch.zeros(n), "sh0": torch.zeros(n, 1, 3), "shN": torch.zeros(n, 0, 3)}
    from splattrain.io.gaussians_file import write_gaussians_file

    write_gaussians_file(tmp_path / "q.ply", params, "ply-compressed")
    back, _ = read_gaussians_file(tmp_path / "q.ply")
    order = [int(torch.cdist(m[None], params["means"]).argmin()) for m in back["means"]]
    expected = torch.nn.functional.normalize(quats[order], dim=-1)
    assert torch.allclose((expected * back["quats"]).sum(-1).abs(), torch.ones(n), atol=1e-5)
