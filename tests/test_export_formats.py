"""Every export format: SPZ bytes against the format description, round trips rendered, initialisation."""

from __future__ import annotations

import gzip
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import tiny_config_text
from splattrain.commands.export import export
from splattrain.commands.snapshot import load_snapshot
from splattrain.engine import load_config
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
    """The SPZ v3 payload of two_gaussians(), derived by hand from the format's reference code."""
    header = bytes.fromhex("4e475350" "03000000" "02000000") + bytes([1, 12, 1, 0])  # degree 1, 12 bits, antialiased
    # (1, -0.5, 2.25) * 4096 = (4096, -2048, 9216); (-0.25, 0, 0) * 4096 = (-1024, 0, 0); 24-bit LE.
    positions = bytes.fromhex("001000" "00f8ff" "002400" "00fcff" "000000" "000000")
    alphas = bytes([128, 255])  # sigmoid(0) * 255 = 127.5 rounds away from zero; sigmoid(20) * 255 -> 255
    # sh0 * 0.15 * 255 + 127.5: 0 -> 128, 1 -> 165.75 -> 166, -1 -> 89.25 -> 89; 2 -> 204, -4 -> 0, 0.5 -> 147
    colors = bytes([128, 166, 89, 204, 0, 147])
    scales = bytes([128, 160, 176, 0, 255, 0])  # (log scale + 10) * 16, clamped to 0..255
    # identity: xyzw (0, 0, 0, 1), largest index 3, three zero magnitudes -> 3 << 30.
    # (w, x, y, z) = (.5, .5, -.5, .5) -> xyzw (.5, -.5, .5, .5): largest index 0 (the first of equals),
    # magnitudes round(511 * .5 / sqrt(.5)) = 361 with sign bits 1, 0, 0, packed after the index.
    rotations = bytes.fromhex("000000c0") + ((((1 << 9 | 361) << 10 | 361) << 10) | 361).to_bytes(4, "little")
    # degree 1 (5 bits, bucket 8): 0.5 -> 192, 0 -> 128, 0.1 -> 141 -> 144, 0.25 -> 160; coefficient major.
    sh = bytes([192, 128, 128, 144, 128, 128, 160, 128, 128]) + bytes([128] * 9)
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
    np.testing.assert_allclose(params["shN"][0, :, 0].numpy(), [0.5, 0.125, 0.25])
    np.testing.assert_allclose(torch.sigmoid(params["opacities"]).numpy(), [128 / 255, 1.0], atol=1e-5)
    quats = torch.nn.functional.normalize(params["quats"], dim=-1)
    assert torch.allclose(quats[0], torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert torch.allclose(quats[1], torch.tensor([0.5, 0.5, -0.5, 0.5]), atol=2e-3)


def test_spz_version_4_and_version_2_files_read(tmp_path):
    import struct

    import zstandard

    payload = expected_spz_bytes()
    n, sizes = 2, [18, 2, 6, 6, 8, 18]
    streams, at = [], 16
    for size in sizes:
        streams.append(payload[at : at + size])
        at += size
    frames = [zstandard.ZstdCompressor().compress(stream) for stream in streams]
    header = struct.pack("<IIIBBBBI12x", 0x5053474E, 4, n, 1, 12, 1, 6, 32)  # the 32-byte version 4 header
    toc = b"".join(struct.pack("<QQ", len(frame), size) for frame, size in zip(frames, sizes))
    (tmp_path / "v4.spz").write_bytes(header + toc + b"".join(frames))
    v4 = read_gaussians_file_full(tmp_path / "v4.spz")
    v3 = decode_spz(payload)
    assert v4.sh_degree == 1 and v4.antialiased
    for key, value in v3.params.items():
        assert torch.equal(v4.params[key], value), key
    # version 2: the same streams with x, y, z of the w >= 0 quaternion as 3 bytes (x * 127.5 + 127.5)
    rot2 = bytes([128, 128, 128]) + bytes([191, 64, 191])  # identity; (.5, -.5, .5, .5) -> 191.25, 63.75, 191.25
    v2 = struct.pack("<IIIBBBB", 0x5053474E, 2, n, 1, 12, 0, 0) + b"".join(streams[:4]) + rot2 + streams[5]
    (tmp_path / "v2.spz").write_bytes(gzip.compress(v2))
    old = read_gaussians_file_full(tmp_path / "v2.spz")
    assert not old.antialiased and torch.equal(old.params["means"], v3.params["means"])
    quats = torch.nn.functional.normalize(old.params["quats"], dim=-1)
    assert torch.allclose(quats, torch.tensor([[1.0, 0, 0, 0], [0.5, 0.5, -0.5, 0.5]]), atol=6e-3)


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
    value = psnr(render_views(snapshot, scene.params, degree), reference.clamp(0, 1))
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


def test_publish_writes_every_requested_format_marked_antialiased(tmp_path):
    extra = """
renderer:
  rasterize_mode: antialiased
default_hooks:
  checkpoint:
    publish: true
    publish_format: [ply, ply-compressed, spz, splat]
"""
    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=3, extra=extra))
    trainer = DefaultTrainer(load_config(tmp_path / "cfg.yaml"), console=Console(quiet=True))
    trainer.train()
    run = trainer.run_dir
    n = trainer.model.num_gaussians
    for name, degree, antialiased in [("scene.ply", 1, True), ("scene.compressed.ply", 1, True),
                                      ("scene.spz", 1, True), ("scene.splat", 0, False)]:
        scene = read_gaussians_file_full(run / name)
        assert (scene.sh_degree, scene.antialiased) == (degree, antialiased), name
        assert 0 < scene.params["means"].shape[0] <= n
    assert b"comment antialiased\n" in (run / "ply" / "step_000003.ply").read_bytes()[:200]


def test_unknown_publish_format_is_a_config_error():
    from splattrain.errors import ConfigError
    from splattrain.hooks.checkpoint_hook import CheckPointHook

    with pytest.raises(ConfigError, match="publish_format"):
        CheckPointHook(publish=True, publish_format=["ply", "obj"])


def test_ecosystem_config_dry_runs(tmp_path):
    """Every writer and hook of the ecosystem config is checked, nothing written. dvclive lives in
    its own package folder (scripts/setup.sh), put last on the path so omegaconf stays this one."""
    import subprocess

    from conftest import REPO

    folder = Path(sys.prefix) / "dvclive-packages"
    assert folder.is_dir() or importlib.util.find_spec("dvclive"), "run scripts/test.sh: dvclive is missing"
    code = (f"import sys; sys.path.append({str(folder)!r}); from splattrain.cli import main; "
            f"sys.exit(main(['fit', '--config', {str(REPO / 'configs' / 'demo_ecosystem.yaml')!r}, '--dry-run', "
            f"'output_dir={tmp_path / 'run'}', 'data.path={REPO / 'data' / 'demo'}']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (tmp_path / "run").exists()  # writers and hooks checked, nothing written
