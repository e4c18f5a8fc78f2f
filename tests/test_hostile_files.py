"""Scene, point-cloud and image files a user is sent: each crafted file is refused in one line
with exit code 2, and files that would expand are refused before they use much memory."""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from cli_check import assert_one_line_error, run_cli, write_config
from conftest import DEMO, REPO, SHARED, needs_shared
from splattrain.data.images import read_image
from splattrain.io.compressed_ply import encode_compressed_ply
from splattrain.io.gaussians_file import read_gaussians_file
from splattrain.io.ply import write_ply
from splattrain.io.spz import MAGIC, encode_spz
from test_nerfstudio import make_nerfstudio

CUP = SHARED / "scenes" / "cup"
#: Address space for a child process: what the interpreter with torch reserves (about 650 MB)
#: plus a few hundred MB; a file needing gigabytes must be refused before it gets there.
ADDRESS_SPACE = 1200 << 20


def _gaussians(n: int = 5, degree: int = 1) -> dict:
    generator = torch.Generator().manual_seed(0)
    return {
        "means": torch.rand(n, 3, generator=generator) * 2 - 1,
        "scales": torch.rand(n, 3, generator=generator) - 3,
        "quats": torch.rand(n, 4, generator=generator) + 0.1,
        "opacities": torch.rand(n, generator=generator),
        "sh0": torch.rand(n, 1, 3, generator=generator),
        "shN": torch.rand(n, (degree + 1) ** 2 - 1, 3, generator=generator) * 0.2,
    }


def _init_from(tmp_path: Path, scene: Path, limit: int = 0) -> subprocess.CompletedProcess:
    """``fit --dry-run`` starting from ``scene`` (model.init.ply), optionally under an address-space limit."""
    config = write_config(tmp_path / "cfg", tmp_path / "run")
    args = ["fit", "--config", str(config), "--dry-run", f"model.init.ply={scene}", "model.sh_degree=3"]
    if not limit:
        return run_cli(*args)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run([sys.executable, "-m", "splattrain", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, preexec_fn=cap, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _spz_header(n: int, degree: int = 0, version: int = 3) -> bytes:
    return struct.pack("<IIIBBBB", MAGIC, version, n, degree, 12, 0, 0)


def _gzip_zeros(header: bytes, size: int) -> bytes:
    """gzip of ``header`` followed by ``size`` zero bytes, compressed in pieces (nothing large held)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(header)]
    piece = bytes(1 << 22)
    for start in range(0, size, len(piece)):
        parts.append(packer.compress(piece[: min(len(piece), size - start)]))
    parts.append(packer.flush())
    return b"".join(parts)


# -- SPZ -----------------------------------------------------------------------------------
def test_spz_gzip_bomb_is_refused_before_it_inflates(tmp_path):
    """A 100 KB gzip SPZ whose 100 MB of streams are all there and decode to 1.5 GB: the declared
    count cannot fit in the memory the process has, so it is refused before anything is inflated."""
    n = 1_500_000  # x 65 bytes per Gaussian at degree 3 (the streams), and 16 x that decoded
    bomb = tmp_path / "bomb.spz"
    bomb.write_bytes(_gzip_zeros(_spz_header(n, degree=3), n * 65))
    assert bomb.stat().st_size < 1 << 20
    line = assert_one_line_error(_init_from(tmp_path, bomb, ADDRESS_SPACE), str(bomb), f"{n} Gaussians", "memory")
    assert "GiB" in line


def test_spz_count_the_file_cannot_hold_is_refused(tmp_path):
    scene = tmp_path / "short.spz"
    scene.write_bytes(gzip.compress(_spz_header(1 << 31) + bytes(64)))
    assert_one_line_error(_init_from(tmp_path, scene), str(scene), "can hold")


@pytest.mark.parametrize("case", ["trailing", "second member", "missing", "corrupt deflate", "NaN fixed point"])
def test_spz_gzip_body_must_match_its_header(tmp_path, case):
    payload = encode_spz(_gaussians(5, degree=1))
    blob = gzip.compress(payload, mtime=0)
    expected = {"trailing": "trailing", "second member": "trailing", "missing": "truncated",
                "corrupt deflate": "corrupt gzip", "NaN fixed point": "fractional bits"}[case]
    if case == "trailing":
        blob = gzip.compress(payload + b"extra bytes", mtime=0)
    elif case == "second member":
        blob = blob + gzip.compress(b"more", mtime=0)
    elif case == "missing":
        blob = gzip.compress(payload[:-7], mtime=0)
    elif case == "corrupt deflate":
        body = bytearray(blob)
        body[12:20] = b"\xff" * 8
        blob = bytes(body)
    else:  # 200 fractional bits: 2^200 does not fit a float32, every position would be 0 or NaN
        blob = gzip.compress(payload[:13] + bytes([200]) + payload[14:], mtime=0)
    scene = tmp_path / "scene.spz"
    scene.write_bytes(blob)
    assert_one_line_error(_init_from(tmp_path, scene), str(scene), expected)


def _spz_v4(frames: list[bytes], unpacked: list[int], n: int, degree: int = 0) -> bytes:
    header = struct.pack("<IIIBBBBI12x", MAGIC, 4, n, degree, 12, 0, len(frames), 32)
    toc = b"".join(struct.pack("<QQ", len(frame), size) for frame, size in zip(frames, unpacked))
    return header + toc + b"".join(frames)


def test_spz_zstd_stream_larger_than_declared_is_refused_in_bounded_memory(tmp_path):
    """Version 4: a 40 KB zstd frame that inflates to 1 GiB (its own header says so) where the
    table of contents declares 9 bytes; it is read only up to what was declared."""
    import zstandard

    n = 1
    sizes = [9 * n, n, 3 * n, 3 * n, 4 * n, 0]
    frames = [zstandard.ZstdCompressor(level=1).compress(bytes(size)) for size in sizes]
    frames[0] = zstandard.ZstdCompressor(level=1, write_content_size=True).compress(bytes(1 << 30))
    scene = tmp_path / "bomb.spz"
    scene.write_bytes(_spz_v4(frames, sizes, n))
    assert scene.stat().st_size < 1 << 20
    assert_one_line_error(_init_from(tmp_path, scene, ADDRESS_SPACE), str(scene), "stream 0", "more bytes")


def test_spz_zstd_count_the_file_cannot_hold_is_refused(tmp_path):
    n = 1 << 31
    sizes = [9 * n, n, 3 * n, 3 * n, 4 * n, 0]
    scene = tmp_path / "huge.spz"
    scene.write_bytes(_spz_v4([b"\0" * 8] * 6, sizes, n))
    assert_one_line_error(_init_from(tmp_path, scene, ADDRESS_SPACE), str(scene), str(n))


# -- .splat and compressed PLY: non-finite values and missing fields -------------------------
def test_splat_with_nan_is_refused(tmp_path):
    record = np.zeros(2, dtype=[("pos", "<f4", 3), ("scale", "<f4", 3), ("rgba", "u1", 4), ("rot", "u1", 4)])
    record["scale"] = 0.1
    record["rot"] = [255, 128, 128, 128]
    record["pos"][1] = [np.nan, 0, 0]
    scene = tmp_path / "nan.splat"
    scene.write_bytes(record.tobytes())
    assert_one_line_error(_init_from(tmp_path, scene), str(scene), "1 of 2 Gaussians", "NaN")


def _compressed_ply(tmp_path: Path) -> tuple[Path, bytes]:
    blob = encode_compressed_ply(_gaussians(8, degree=1))
    return tmp_path / "scene.compressed.ply", blob


def test_compressed_ply_with_nan_bounds_is_refused(tmp_path):
    path, blob = _compressed_ply(tmp_path)
    at = blob.index(b"end_header\n") + len(b"end_header\n")
    path.write_bytes(blob[:at] + np.float32(np.nan).tobytes() + blob[at + 4 :])  # chunk 0's min_x
    assert_one_line_error(_init_from(tmp_path, path), str(path), "NaN")


def test_compressed_ply_missing_a_field_is_refused(tmp_path):
    path, blob = _compressed_ply(tmp_path)
    path.write_bytes(blob.replace(b"property float max_y\n", b"property float xxx_y\n", 1))
    assert_one_line_error(_init_from(tmp_path, path), str(path), "'chunk' lacks max_y")


# -- PLY headers ------------------------------------------------------------------------------
def _ply_with_header(tmp_path: Path, change) -> Path:
    path = tmp_path / "scene.ply"
    write_ply(path, _gaussians(4, degree=1))
    blob = path.read_bytes()
    at = blob.index(b"end_header\n")
    path.write_bytes(change(blob[:at]) + blob[at:])
    return path


@pytest.mark.parametrize("case, change, expected", [
    ("count abc", lambda h: h.replace(b"element vertex 4", b"element vertex abc"), "count 'abc'"),
    ("negative count", lambda h: h.replace(b"element vertex 4", b"element vertex -1"), "count '-1'"),
    ("no name", lambda h: h.replace(b"property float opacity", b"property float"), "unsupported property"),
    ("duplicate", lambda h: h.replace(b"property float opacity", b"property float scale_0"), "'scale_0' twice"),
    ("f_rest gap", lambda h: h.replace(b"property float f_rest_4\n", b"property float f_rest_9\n"), "f_rest_4 is missing"),
    ("too many", lambda h: h.replace(b"element vertex 4", b"element vertex 400000000000"), "declares too many"),
    ("no count", lambda h: h.replace(b"element vertex 4", b"element vertex"), "not 'element <name> <count>'"),
])
def test_ply_header_is_checked(tmp_path, case, change, expected):
    path = _ply_with_header(tmp_path, change)
    assert_one_line_error(_init_from(tmp_path, path), str(path), expected)


def test_a_ply_header_of_many_lines_is_refused_within_seconds(tmp_path):
    """60,000 extra properties (a 1.3 MB header): refused from its line count, without reading
    each property against every other (minutes)."""
    import time

    extra = b"".join(b"property float extra_%d\n" % i for i in range(60_000))
    path = _ply_with_header(tmp_path, lambda h: h.replace(b"property float opacity\n", b"property float opacity\n" + extra))
    started = time.monotonic()
    result = _init_from(tmp_path, path)
    assert time.monotonic() - started < 30
    assert_one_line_error(result, str(path), "a PLY header of 60", "at most 4096")


def test_nerfstudio_point_cloud_with_a_bad_header_is_refused(tmp_path):
    scene = tmp_path / "ns"
    transforms = make_nerfstudio(scene)
    meta = json.loads(transforms.read_text())
    meta["ply_file_path"] = "points.ply"
    transforms.write_text(json.dumps(meta))
    (scene / "points.ply").write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 2x\n"
                                       b"property float x\nend_header\n" + bytes(8))
    config = write_config(tmp_path / "cfg", tmp_path / "run")
    result = run_cli("fit", "--config", str(config), "--dry-run", f"data.path={scene}", "data.downscale=1")
    assert_one_line_error(result, str(scene / "points.ply"), "count '2x'")


# -- zero Gaussians -------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", ["splat", "spz", "ply"])
def test_an_empty_scene_file_cannot_start_a_run(tmp_path, suffix):
    scene = tmp_path / f"empty.{suffix}"
    if suffix == "splat":
        scene.write_bytes(b"")
    elif suffix == "spz":
        scene.write_bytes(gzip.compress(_spz_header(0)))
    else:
        write_ply(scene, {k: v[:0] for k, v in _gaussians(1, degree=3).items()})
    assert read_gaussians_file(scene)[0]["means"].shape == (0, 3)  # the file itself is valid
    assert_one_line_error(_init_from(tmp_path, scene), str(scene), "holds no Gaussians")


# -- COLMAP --------------------------------------------------------------------------------
@needs_shared(CUP / "images")
def test_colmap_points_count_is_checked_against_the_file_size(tmp_path):
    scene = tmp_path / "cup"
    (scene / "sparse" / "0").mkdir(parents=True)
    (scene / "images").symlink_to(CUP / "images")
    for name in ("cameras.bin", "images.bin"):
        shutil.copy(CUP / "sparse" / "0" / name, scene / "sparse" / "0" / name)
    points = scene / "sparse" / "0" / "points3D.bin"
    points.write_bytes(struct.pack("<Q", 1 << 40))
    config = write_config(tmp_path / "cfg", tmp_path / "run")
    result = run_cli("fit", "--config", str(config), "--dry-run", f"data.path={scene}", "data.downscale=8")
    assert_one_line_error(result, str(points), f"declares {1 << 40} points")


# -- transforms.json ------------------------------------------------------------------------
def _demo_copy(tmp_path: Path) -> Path:
    scene = tmp_path / "demo"
    shutil.copytree(DEMO, scene)
    return scene


def test_absolute_file_path_with_a_mask_folder(tmp_path):
    """Frames naming images outside the scene folder by absolute path: their masks are found by file name."""
    scene = _demo_copy(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(scene / "train", elsewhere)
    path = scene / "transforms_train.json"
    meta = json.loads(path.read_text())
    for frame in meta["frames"]:
        frame["file_path"] = str(elsewhere / Path(frame["file_path"]).name)
    path.write_text(json.dumps(meta))
    (scene / "masks" / "test").mkdir(parents=True)
    for image in sorted(elsewhere.glob("*.png")):  # by file name
        Image.new("L", Image.open(image).size, 255).save(scene / "masks" / f"{image.name}.png")
    for image in sorted((scene / "test").glob("*.png")):  # by path under the scene folder
        Image.new("L", Image.open(image).size, 255).save(scene / "masks" / "test" / f"{image.name}.png")
    config = write_config(tmp_path / "cfg", tmp_path / "run")
    result = run_cli("fit", "--config", str(config), "--dry-run", f"data.path={scene}")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("value", [0, -400])
def test_focal_length_must_be_positive(tmp_path, value):
    scene = _demo_copy(tmp_path)
    path = scene / "transforms_train.json"
    meta = json.loads(path.read_text())
    meta.pop("camera_angle_x")
    meta["fl_x"] = value
    path.write_text(json.dumps(meta))
    config = write_config(tmp_path / "cfg", tmp_path / "run")
    result = run_cli("fit", "--config", str(config), "--dry-run", f"data.path={scene}")
    assert_one_line_error(result, str(path), "'fl_x' must be > 0")


# -- images of every Pillow mode ------------------------------------------------------------
@pytest.mark.parametrize("mode, value, fmt", [
    ("L", 128, "PNG"), ("LA", (128, 255), "PNG"), ("P", None, "PNG"), ("RGB", (128, 128, 128), "PNG"),
    ("RGBA", (128, 128, 128, 255), "PNG"), ("CMYK", (0, 0, 0, 127), "TIFF"), ("YCbCr", (128, 128, 128), "TIFF"),
    ("LAB", (137, 128, 128), "TIFF"), ("I", 32896, "TIFF"), ("I;16", 32896, "PNG"), ("I;16B", 32896, "TIFF"),
    ("F", 0.5, "TIFF"), ("F", 32896.0, "TIFF"), ("1", 1, "PNG"), ("PA", None, "TIFF"), ("RGBX", (128, 128, 128, 0), "TIFF"),
])
def test_every_pillow_mode_decodes_to_its_brightness(tmp_path, mode, value, fmt):
    """Mid-grey in each mode decodes to 8-bit RGB(A) near 128 (``1``: white, 255)."""
    if mode in ("P", "PA"):
        image = Image.new("RGB", (4, 3), (128, 128, 128)).convert("P", palette=Image.Palette.ADAPTIVE)
        image = image.convert("PA") if mode == "PA" else image
    else:
        image = Image.new(mode, (4, 3), value)
    path = tmp_path / f"grey.{fmt.lower()}"
    image.save(path, format=fmt)
    decoded = read_image(path)
    assert decoded.dtype == np.uint8 and decoded.shape[:2] == (3, 4) and decoded.shape[2] in (3, 4)
    expected = 255 if mode == "1" else 128
    assert np.abs(decoded[..., :3].astype(int) - expected).max() <= 3, (mode, decoded[0, 0])
    if mode not in ("LA", "RGBA", "PA"):
        assert decoded.shape[2] == 3, mode  # no alpha channel invented (LAB's A is a colour axis)


def test_float_tiff_with_nan_is_refused_and_one_in_unit_range_trains(tmp_path):
    scene = _demo_copy(tmp_path)
    image = scene / "train" / "r_0.png"
    grey = np.asarray(Image.open(image).convert("L"), dtype=np.float32) / 255.0
    Image.fromarray(grey, mode="F").save(scene / "train" / "r_0.tif")
    image.unlink()
    path = scene / "transforms_train.json"
    meta = json.loads(path.read_text())
    meta["frames"][0]["file_path"] = "./train/r_0.tif"
    path.write_text(json.dumps(meta))
    decoded = read_image(scene / "train" / "r_0.tif")
    assert abs(float(decoded.mean()) - float(grey.mean()) * 255) < 1.0  # not black
    config = write_config(tmp_path / "cfg", tmp_path / "run", steps=1)
    assert run_cli("fit", "--config", str(config), f"data.path={scene}", "--quiet").returncode == 0
    grey[0, 0] = np.nan
    Image.fromarray(grey, mode="F").save(scene / "train" / "r_0.tif")
    result = run_cli("fit", "--config", str(config), f"data.path={scene}", f"output_dir={tmp_path / 'run2'}")
    assert_one_line_error(result, str(scene / "train" / "r_0.tif"), "32-bit float")
