"""Capture variants (splattrain.synthetic.capture_variants) of a small dome and of the cup, each a
scene the COLMAP reader trains, and benchmarks/bench_longer_runs.py run over them in parts."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, SHARED, needs_shared
from splattrain.config.schema import DataConfig
from splattrain.data.colmap import load_colmap
from splattrain.data.colmap_model import read_model
from splattrain.synthetic.capture_variants import VARIANTS, centres, read_capture, write_variants
from splattrain.synthetic.large_scene import generate_large_scene

CUP = SHARED / "scenes" / "cup"


@pytest.fixture(scope="module")
def dome(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dome") / "dome"
    generate_large_scene(folder, views=24, width=48, height=32, points=400)
    return folder


def _load(folder: Path):
    overrides = json.loads((folder / "variant.json").read_text())
    tests = overrides["test_images"]
    return load_colmap(folder, DataConfig(path=str(folder), test_every=0, test_images=tests)), overrides


def _angle(a: np.ndarray, b: np.ndarray) -> float:
    cos = (np.trace(a[:3, :3] @ b[:3, :3].T) - 1) / 2
    return math.degrees(math.acos(min(1.0, max(-1.0, cos))))


def test_each_variant_is_a_scene_with_what_it_names(dome, tmp_path):
    written = write_variants(dome, tmp_path, VARIANTS, width=32)
    assert sorted(written) == sorted(VARIANTS)
    original = read_capture(written["original"])
    names = [v.name for v in original.views]
    assert len(names) == 24 and original.views[0].pixels.shape == (21, 32, 3)
    scenes = {variant: _load(folder) for variant, folder in written.items()}
    for variant, (scene, doc) in scenes.items():
        assert [f.name for f in scene.test] == sorted(Path(n).stem for n in doc["test_images"]), variant
        assert doc["overrides"][:2] == ["data.test_every=0", f"data.test_images=[{','.join(json.dumps(n) for n in doc['test_images'])}]"]
    # the reader's default split (every 8th by name) for all but the half orbit
    assert scenes["original"][1]["test_images"] == names[::8]
    # half orbit: the cameras of one half turn, the test views at its two ends
    half = read_capture(written["half_orbit"])
    c = centres(original.views)
    middle = c.mean(0)
    kept = centres(half.views) - middle
    assert 10 <= len(half.views) <= 14
    axes = np.linalg.svd(c - middle)[2]  # the orbit's plane, then its normal
    azimuth = np.arctan2(kept @ axes[1], kept @ axes[0])
    centre = np.arctan2(np.sin(azimuth).mean(), np.cos(azimuth).mean())  # the middle of the arc
    turn = np.angle(np.exp(1j * (azimuth - centre)))  # signed angle from it
    assert np.ptp(turn) <= math.pi
    ranked = [half.views[i].name for i in np.argsort(turn)]
    assert set(scenes["half_orbit"][1]["test_images"]) == {ranked[0], ranked[-1]}
    # every fourth photo from the third, beside the full capture's test views (none trains)
    sparse = [v.name for v in read_capture(written["every_fourth"]).views]
    assert sparse == sorted(names[2::4] + names[::8]) and scenes["every_fourth"][1]["test_images"] == names[::8]
    assert not set(names[2::4]) & set(names[::8])
    # 1/8 resolution, intrinsics following; trained as it is
    eighth = read_model(written["eighth_res"] / "sparse" / "0")
    camera = eighth.cameras[1]
    assert (camera.width, camera.height) == (4, 3)
    assert camera.params[0] == pytest.approx(original.views[0].camera.params[0] / 8, rel=0.01)
    assert scenes["eighth_res"][1]["overrides"][-1] == "data.downscale=1"
    # pose noise: training cameras turned by about the given angle, test cameras exact
    noisy = {v.name: v.viewmat for v in read_capture(written["pose_noise"]).views}
    tests = set(scenes["pose_noise"][1]["test_images"])
    for view in original.views:
        turned = _angle(noisy[view.name], view.viewmat)
        assert turned < 1e-4 if view.name in tests else 0.45 < turned < 0.55, view.name
    # a distorted lens: OPENCV cameras, and the reader's undistortion gives the photos back
    distorted = read_model(written["distorted"] / "sparse" / "0")
    assert {c.model for c in distorted.cameras.values()} == {"OPENCV"}
    plain, lens = scenes["original"][0], scenes["distorted"][0]
    for a, b in zip(plain.train, lens.train):
        valid = b.mask if b.mask is not None else np.ones(b.image.shape[:2], bool)
        error = np.mean((a.image.astype(float) - b.image.astype(float))[valid] ** 2)
        assert 10 * np.log10(255**2 / error) > 24, a.name


@needs_shared(CUP)
def test_the_cup_variants_load(tmp_path):
    written = write_variants(CUP, tmp_path, VARIANTS, width=40)
    counts = {variant: len(_load(folder)[0].train) + len(_load(folder)[0].test) for variant, folder in written.items()}
    assert counts["original"] == 77 and counts["every_fourth"] == 29 and counts["eighth_res"] == 77
    assert 30 <= counts["half_orbit"] < 77


def _table(stdout: str) -> list:
    """The benchmark's table: its header, then the rows (the runs' warnings come before it)."""
    lines = stdout.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("variant ")):]


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_longer_runs.py"), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def test_the_benchmark_prints_the_ladder_and_runs_in_parts(tmp_path):
    common = ["--dome", "--dome-views", "16", "--dome-width", "30", "--dome-points", "300", "--size", "24",
              "--variants", "original", "pose_noise", "--steps", "2", "4", "--out", str(tmp_path),
              "metrics.lpips=false", "trainer.val_interval=0"]
    first = _bench(*common, "--stop-at", "3")
    assert first.returncode == 0, first.stderr
    table = _table(first.stdout)
    assert table[0].split() == ["variant", "steps", "test", "PSNR", "fall", "train", "PSNR", "Gaussians", "train",
                                "s", "wall", "s"]
    rows = {tuple(line.split()[:2]): line.split() for line in table[1:5]}
    assert set(rows) == {("dome/original", "2"), ("dome/original", "3/4"), ("dome/pose_noise", "2"),
                         ("dome/pose_noise", "3/4")}
    assert rows[("dome/original", "2")][3] == "+0.00"
    assert "run the same command again to go on" in first.stdout
    run = tmp_path / "runs" / "dome" / "original" / "steps_4"
    assert json.loads((run / "results.json").read_text())["stopped"]["step"] == 3
    finished_2 = (tmp_path / "runs" / "dome" / "original" / "steps_2" / "results.json").read_bytes()
    second = _bench(*common)
    assert second.returncode == 0, second.stderr
    results = json.loads((run / "results.json").read_text())
    assert results["steps"] == 4 and "stopped" not in results
    rows = {tuple(line.split()[:2]): line.split() for line in _table(second.stdout)[1:5]}
    assert ("dome/original", "4") in rows and ("dome/pose_noise", "4") in rows
    assert float(rows[("dome/original", "4")][2]) == pytest.approx(results["psnr"], abs=0.006)
    assert (tmp_path / "runs" / "dome" / "original" / "steps_2" / "results.json").read_bytes() == finished_2
    assert "go on" not in second.stdout


def test_the_benchmark_adds_the_aligned_psnr_of_runs_that_align_test_poses(tmp_path):
    done = _bench("--dome", "--dome-views", "16", "--dome-width", "30", "--dome-points", "300", "--size", "24",
                  "--variants", "original", "--steps", "3", "--out", str(tmp_path), "metrics.lpips=false",
                  "trainer.val_interval=0", "metrics.align_poses=3")
    assert done.returncode == 0, done.stderr
    header, row = _table(done.stdout)[:2]
    assert header.split()[5] == "aligned"
    results = json.loads((tmp_path / "runs" / "dome" / "original" / "steps_3" / "results.json").read_text())
    assert float(row.split()[4]) == pytest.approx(results["aligned_psnr"], abs=0.006)


@pytest.mark.slow  # COLMAP on real photos
@needs_shared(CUP)
def test_the_benchmark_adds_a_scene_process_makes_of_every_nth_photo(tmp_path):
    scene = tmp_path / "cup16"
    (scene / "images").mkdir(parents=True)
    for n in range(1, 17):  # out of name order on disk: 10.jpg sorts before 2.jpg as text
        (scene / "images" / f"{n}.jpg").write_bytes((CUP / "images" / f"{n}.jpg").read_bytes())
    result = _bench("--scene", str(scene), "--variants", "--processed", "2", "--steps", "2", "--out",
                    str(tmp_path / "out"), "metrics.lpips=false", "trainer.val_interval=0", "data.downscale=8")
    assert result.returncode == 0, result.stderr
    staged = tmp_path / "out" / "sources" / "cup16_every_2"
    assert sorted(p.name for p in staged.iterdir()) == sorted(f"{n}.jpg" for n in range(1, 17, 2))
    folder = tmp_path / "out" / "variants" / "cup16" / "processed_2"
    assert (folder / "sparse" / "0").is_dir() and json.loads((folder / "variant.json").read_text())["overrides"] == []
    rows = _table(result.stdout)[1:]
    assert len(rows) == 1 and rows[0].split()[:2] == ["cup16/processed_2", "2"]
