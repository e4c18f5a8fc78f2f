"""Meshes: TSDF fusion recovers a known sphere, mesh files round trip, ``export --format mesh`` on a
trained run writes a mesh Open3D loads with vertex colours, and bad options or a missing Open3D
stop in one line."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from cli_check import assert_one_line_error, run_cli
from splattrain.cli import main
from conftest import REPO, tiny_config_text
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from splattrain.errors import DataError
from splattrain.mesh import MeshArrays, TsdfFusion, default_settings, keep_largest_components, read_mesh_ply
from splattrain.mesh.files import is_mesh_ply, write_mesh

open3d = pytest.importorskip("open3d", reason="the mesh extra (open3d) is not installed")


def look_at(eye: np.ndarray) -> np.ndarray:
    """World-to-camera [4, 4] (OpenCV axes) of a camera at ``eye`` looking at the origin, z up."""
    forward = -eye / np.linalg.norm(eye)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    viewmat = np.eye(4)
    viewmat[:3, :3] = np.stack([right, down, forward])
    viewmat[:3, 3] = -viewmat[:3, :3] @ eye
    return viewmat


def sphere_depth(viewmat: np.ndarray, K: np.ndarray, size: int, radius: float) -> np.ndarray:
    """Exact z-depth [size, size] of a sphere of ``radius`` at the origin (0 where rays miss)."""
    u, v = np.meshgrid(np.arange(size) + 0.5, np.arange(size) + 0.5)
    dirs = np.stack([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], np.ones_like(u)], axis=-1)  # z = 1
    centre = viewmat[:3, 3]  # the origin in camera coordinates
    a = (dirs * dirs).sum(-1)
    b = (dirs @ centre)
    disc = b * b - a * (centre @ centre - radius**2)
    t = (b - np.sqrt(np.maximum(disc, 0.0))) / a
    return np.where(disc > 0, t, 0.0).astype(np.float32)  # t is the z-depth as dirs have z = 1


def sphere_cameras(count: int, distance: float, size: int):
    focal = 0.5 * size / math.tan(math.radians(20.0))
    K = np.array([[focal, 0.0, size / 2.0], [0.0, focal, size / 2.0], [0.0, 0.0, 1.0]])
    golden = math.pi * (3.0 - math.sqrt(5.0))
    for i in range(count):
        z = 1.0 - 2.0 * (i + 0.5) / count
        ring = math.sqrt(1.0 - z * z)
        eye = distance * np.array([ring * math.cos(i * golden), ring * math.sin(i * golden), z])
        yield look_at(eye), K


def test_tsdf_fusion_recovers_a_sphere_within_a_voxel():
    radius, size = 0.5, 64
    settings = default_settings(extent=2 * radius, voxel_size=0.02)
    fusion = TsdfFusion(settings)
    for viewmat, K in sphere_cameras(24, 2.0, size):
        depth = sphere_depth(viewmat, K, size, radius)
        colour = np.zeros((size, size, 3), np.uint8)
        colour[..., 0] = 200  # red everywhere: the mesh must carry it
        fusion.integrate(colour, depth, K, viewmat)
    mesh = fusion.extract()
    distances = np.linalg.norm(mesh.vertices, axis=1)
    assert len(mesh.faces) > 1000
    assert abs(distances.mean() - radius) < settings.voxel_size / 2
    assert np.percentile(np.abs(distances - radius), 99) < settings.voxel_size
    assert (np.abs(mesh.colors.astype(int) - [200, 0, 0]) <= 2).all()
    # a closed surface: every edge is shared by two triangles
    edges = np.sort(np.concatenate([mesh.faces[:, [0, 1]], mesh.faces[:, [1, 2]], mesh.faces[:, [2, 0]]]), axis=1)
    _, counts = np.unique(edges, axis=0, return_counts=True)
    assert (counts == 2).mean() > 0.99


def test_fusion_refuses_a_volume_that_cannot_fit(monkeypatch):
    from splattrain.io import limits

    monkeypatch.setattr(limits, "available_memory", lambda: 64 * 2**20)  # 64 MiB free
    fusion = TsdfFusion(default_settings(extent=1.0, voxel_size=0.0005))
    viewmat, K = next(sphere_cameras(1, 2.0, 256))
    with pytest.raises(DataError, match=r"TSDF volume .* more than the 64.0 MiB available; use a larger --voxel-size"):
        fusion.integrate(np.zeros((256, 256, 3), np.uint8), sphere_depth(viewmat, K, 256, 0.5), K, viewmat)
    assert fusion.blocks == 0 and fusion.views == 0


def two_pieces() -> MeshArrays:
    """A big and a small triangle fan, apart."""
    big = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], np.float32)
    small = np.array([[5, 5, 5], [5.1, 5, 5], [5, 5.1, 5]], np.float32)
    vertices = np.concatenate([small, big])
    faces = np.array([[0, 1, 2], [3, 4, 5], [3, 5, 6]], np.int32)
    colors = np.arange(21, dtype=np.uint8).reshape(7, 3)
    return MeshArrays(vertices, faces, colors)


def test_keep_largest_components():
    mesh = two_pieces()
    kept = keep_largest_components(mesh, 1)
    assert len(kept.faces) == 2 and len(kept.vertices) == 4
    np.testing.assert_array_equal(kept.vertices, mesh.vertices[3:])
    np.testing.assert_array_equal(kept.colors, mesh.colors[3:])
    assert len(keep_largest_components(mesh, 0).faces) == 3


@pytest.mark.parametrize("suffix", [".ply", ".obj"])
def test_mesh_files_round_trip_and_open3d_reads_them(tmp_path, suffix):
    mesh = two_pieces()
    path = tmp_path / f"m{suffix}"
    write_mesh(path, mesh)
    loaded = open3d.io.read_triangle_mesh(str(path))
    np.testing.assert_allclose(np.asarray(loaded.vertices), mesh.vertices, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(loaded.triangles), mesh.faces)
    assert loaded.has_vertex_colors()
    np.testing.assert_allclose(np.asarray(loaded.vertex_colors) * 255, mesh.colors, atol=0.6)
    if suffix == ".ply":
        assert is_mesh_ply(path)
        back = read_mesh_ply(path)
        for name in ("vertices", "faces", "colors"):
            np.testing.assert_array_equal(getattr(back, name), getattr(mesh, name))


def test_read_mesh_ply_refuses_bad_files(tmp_path):
    path = tmp_path / "m.ply"
    write_mesh(path, two_pieces())
    raw = path.read_bytes()
    path.write_bytes(raw[:-4])
    with pytest.raises(DataError, match="declares"):
        read_mesh_ply(path)
    path.write_bytes(raw.replace(b"element face 3", b"element face 4000000000"))
    with pytest.raises(DataError, match="declares"):
        read_mesh_ply(path)
    body = bytearray(raw)
    body[-4:] = (99).to_bytes(4, "little")  # the last face names vertex 99 of 7
    path.write_bytes(bytes(body))
    with pytest.raises(DataError, match="names vertex 99 of 7"):
        read_mesh_ply(path)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny demo-scene run (400 steps at 1/4 resolution)."""
    tmp = tmp_path_factory.mktemp("mesh")
    (tmp / "cfg.yaml").write_text(tiny_config_text(tmp, steps=400))
    DefaultTrainer(load_config(tmp / "cfg.yaml"), console=Console(quiet=True)).train()
    return tmp / "run"


def test_export_mesh_of_a_trained_run(run_dir, tmp_path):
    out = tmp_path / "scene.ply"
    result = run_cli("export", str(run_dir), "--format", "mesh", "--out", str(out), "--world-frame", "original")
    assert result.returncode == 0, result.stderr
    assert "wrote a mesh of" in result.stdout + result.stderr
    loaded = open3d.io.read_triangle_mesh(str(out))
    assert len(loaded.triangles) > 500 and loaded.has_vertex_colors()
    colours = np.asarray(loaded.vertex_colors)
    assert colours.std(axis=0).max() > 0.05  # the demo's colours, not one flat tint
    vertices = np.asarray(loaded.vertices)  # the demo's objects lie within its ground disk of radius 1.25
    assert np.percentile(np.abs(vertices[:, :2]), 95) < 1.4 and np.percentile(vertices[:, 2], 5) > -0.6


@pytest.mark.parametrize("options, fragments", [
    (["--voxel-size", "-1"], ["--voxel-size must be a positive number"]),
    (["--depth", "mean"], ["--depth 'mean'", "median, expected"]),
    (["--components", "-3"], ["--components must be >= 0"]),
    (["--voxel-size", "0.01", "--trunc", "0.001"], ["--trunc must be at least the voxel size"]),
    (["--out", "x.stl"], ["a mesh is written as .ply or .obj"]),
])
def test_bad_mesh_options_give_one_line(run_dir, tmp_path, options, fragments, capsys):
    if "--out" not in options:
        options = [*options, "--out", str(tmp_path / "m.ply")]
    assert main(["export", str(run_dir), "--format", "mesh", *options]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and all(fragment in lines[0] for fragment in fragments), lines
    assert not (tmp_path / "m.ply").exists()


def test_mesh_options_need_the_mesh_format(run_dir, tmp_path, capsys):
    assert main(["export", str(run_dir), "--format", "ply", "--voxel-size", "0.1", "--out", str(tmp_path / "s.ply")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--voxel-size applies to --format mesh only" in lines[0]


def test_without_open3d_one_line_names_the_extra(run_dir, tmp_path):
    fake = tmp_path / "no_open3d" / "open3d"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'open3d'\", name='open3d')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "splattrain", "export", str(run_dir), "--format", "mesh", "--out",
                             str(tmp_path / "m.ply")], cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert_one_line_error(result, "pip install 'splattrain[mesh]'")
    assert not (tmp_path / "m.ply").exists()


def test_the_fusion_estimate_matches_the_blocks_open3d_allocates():
    from splattrain.mesh.budget import BLOCK_BYTES, estimate_fusion, touched_blocks

    for voxel, trunc_voxels in [(0.005, 4.0), (0.01, 40.0)]:
        settings = default_settings(extent=1.0, voxel_size=voxel, trunc=voxel * trunc_voxels)
        fusion, quarter = TsdfFusion(settings), []
        for viewmat, K in sphere_cameras(8, 2.0, 64):
            fusion.integrate(np.zeros((64, 64, 3), np.uint8), sphere_depth(viewmat, K, 64, 0.5), K, viewmat)
            small = K.copy()
            small[:2] *= 0.25  # the survey: a quarter of the resolution, one pixel per sample of Open3D's
            quarter.append(touched_blocks(sphere_depth(viewmat, small, 16, 0.5), small, viewmat, voxel, settings.trunc,
                                          1e30))
        estimate, hashmap = estimate_fusion(quarter), fusion.grid.hashmap()
        assert abs(estimate.blocks - hashmap.size()) <= 0.1 * hashmap.size(), (voxel, estimate, hashmap.size())
        assert abs(estimate.capacity - hashmap.capacity()) <= 0.1 * hashmap.capacity()
        # the peak counts a growth's copied blocks and new buffers together, beyond the final grid
        assert estimate.peak_bytes > hashmap.capacity() * BLOCK_BYTES


def test_a_growth_counts_the_copied_blocks_and_the_new_buffers(monkeypatch):
    from splattrain.io import limits
    from splattrain.mesh.budget import BLOCK_BYTES

    fusion = TsdfFusion(default_settings(extent=1.0, voxel_size=0.003))
    views = list(sphere_cameras(12, 2.0, 128))
    for viewmat, K in views[:6]:
        fusion.integrate(np.zeros((128, 128, 3), np.uint8), sphere_depth(viewmat, K, 128, 0.5), K, viewmat)
    hashmap = fusion.grid.hashmap()
    size, capacity = int(hashmap.size()), int(hashmap.capacity())
    assert size > capacity / 2  # the next views make it grow, to twice its capacity
    # room for the new buffers alone, not for the blocks copied out of the old ones as well
    monkeypatch.setattr(limits, "available_memory", lambda: 2 * capacity * BLOCK_BYTES + BLOCK_BYTES)
    with pytest.raises(DataError, match=r"TSDF volume \(growing to .* use a larger --voxel-size"):
        for viewmat, K in views[6:]:
            fusion.integrate(np.zeros((128, 128, 3), np.uint8), sphere_depth(viewmat, K, 128, 0.5), K, viewmat)
    assert int(fusion.grid.hashmap().capacity()) == capacity


#: Runs the command line with an address-space limit of what is in use plus argv[1] bytes.
LIMITED = """
import resource, sys
import open3d, torch
from splattrain.cli import main
with open("/proc/self/status") as status:
    used = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (used + int(sys.argv[1]), resource.RLIM_INFINITY))
sys.exit(main(sys.argv[2:]))
"""


def test_a_fusion_beyond_the_memory_limit_is_refused_before_it_starts(run_dir, tmp_path):
    out = tmp_path / "m.ply"
    result = subprocess.run([sys.executable, "-c", LIMITED, str(3 * 2**30 // 2), "export", str(run_dir), "--format",
                             "mesh", "--voxel-size", "0.002", "--trunc", "0.1", "--out", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    line = assert_one_line_error(result, "the TSDF volume (about", "blocks of 16^3 voxels of 0.002",
                                 "of memory, more than the", "use a larger --voxel-size")
    assert "fusing" not in result.stdout + result.stderr, line  # refused before any depth was fused
    assert not out.exists()


@pytest.mark.parametrize("options, fragments", [
    (["--voxel-size", "1e-300"], ["--voxel-size 1e-300 is below float32's range"]),
    (["--voxel-size", "nan"], ["--voxel-size must be a positive number, got nan"]),
    (["--trunc", "inf"], ["--trunc must be a positive number, got inf"]),
    (["--voxel-size", "0.01", "--trunc", "1e6"], ["--trunc 1e+06 is 1e+08 voxels of 0.01; give at most 64 voxels"]),
    (["--trunc", "1e6"], ["--trunc 1e+06 is", "give at most 64 voxels"]),
    (["--voxel-size", "1e-7"], ["--voxel-size 1e-07 is too small", "float32 voxel indices"]),
    (["--min-views", "1000"], ["--min-views 1000: the run has 48 training views"]),
])
def test_bad_sizes_are_one_line_before_any_fusion(run_dir, tmp_path, options, fragments, capsys):
    assert main(["export", str(run_dir), "--format", "mesh", *options, "--out", str(tmp_path / "m.ply")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and all(fragment in lines[0] for fragment in fragments), lines
    assert "fusing" not in captured.out + captured.err and "Traceback" not in captured.err
    assert not (tmp_path / "m.ply").exists()


def test_out_naming_a_folder_is_refused_before_any_work(run_dir, tmp_path, capsys, monkeypatch):
    from splattrain.commands import export as export_command

    folder = tmp_path / "mesh.ply"
    folder.mkdir()
    monkeypatch.setattr(export_command, "load_snapshot", lambda *a, **k: pytest.fail("the run was loaded"))
    assert main(["export", str(run_dir), "--format", "mesh", "--out", str(folder)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"--out {folder} is a folder" in lines[0], lines
    assert list(folder.iterdir()) == []


def child_pids(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def has_open3d(pid: int) -> bool:
    try:
        return "open3d" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sigterm_mid_fusion_ends_the_export_within_ten_seconds(run_dir, tmp_path):
    out = tmp_path / "m.ply"
    process = subprocess.Popen([sys.executable, "-m", "splattrain", "export", str(run_dir), "--format", "mesh",
                                "--voxel-size", "0.002", "--trunc", "0.1", "--out", str(out)], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        output = ""
        while "fusing" not in output:  # the survey is done, fusion starts
            line = process.stdout.readline()
            assert line, output
            output += line
        deadline = time.monotonic() + 120
        while not any(has_open3d(child) for child in child_pids(process.pid)):  # the fusion process is up
            assert process.poll() is None and time.monotonic() < deadline, output
            time.sleep(0.05)
        fusing = child_pids(process.pid)
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
        took = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 143, output + rest
    assert took < 10.0, took
    assert "SIGTERM" in rest and "Traceback" not in output + rest, rest
    assert "wrote a mesh" not in rest and not out.exists()
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in fusing):
        assert time.monotonic() < deadline, "the fusion process outlived the export"
        time.sleep(0.05)
