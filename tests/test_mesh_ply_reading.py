"""Mesh PLYs a user is sent, read by ``splattrain view``: a duplicated property, a header declaring
more than memory holds, and colours out of range (NaN, 1e308) give one line or one warning,
never a traceback or a NumPy warning."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from cli_check import assert_one_line_error, run_cli
from conftest import REPO
from splattrain.mesh.files import MeshArrays, read_mesh_ply, write_mesh


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def mesh_ply(path: Path, vertex_props: list[tuple[str, str]], rows: np.ndarray, faces: np.ndarray) -> Path:
    """A binary mesh PLY with the vertex properties ``vertex_props`` (type, name) holding ``rows``."""
    header = ["ply", "format binary_little_endian 1.0", f"element vertex {len(rows)}"]
    header += [f"property {kind} {name}" for kind, name in vertex_props]
    header += [f"element face {len(faces)}", "property list uchar int vertex_indices", "end_header"]
    face_rows = np.empty(len(faces), dtype=[("n", "u1"), ("ids", "<i4", 3)])
    face_rows["n"], face_rows["ids"] = 3, faces
    path.write_bytes(("\n".join(header) + "\n").encode() + rows.tobytes() + face_rows.tobytes())
    return path


def quad() -> tuple[np.ndarray, np.ndarray]:
    return (np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], np.float32),
            np.array([[0, 1, 2], [0, 2, 3]], np.int32))


def test_a_duplicated_vertex_property_is_one_line(tmp_path):
    vertices, faces = quad()
    rows = np.zeros(4, dtype=[("a", "<f4"), ("b", "<f4"), ("c", "<f4"), ("d", "<f4")])
    for name, column in zip("abc", vertices.T):
        rows[name] = column
    path = mesh_ply(tmp_path / "dup.ply", [("float", "x"), ("float", "y"), ("float", "z"), ("float", "x")], rows, faces)
    before = path.read_bytes()
    result = run_cli("view", str(path), "--port", str(free_port()))
    assert_one_line_error(result, str(path), "property 'x' twice")
    assert path.read_bytes() == before


def test_a_mesh_declaring_more_than_memory_is_refused_before_reading(tmp_path):
    path = tmp_path / "huge.ply"
    count = 20_000_000_000  # 20 billion vertices of 15 bytes: a sparse file of 300 GB
    header = ("ply\nformat binary_little_endian 1.0\n"
              f"element vertex {count}\nproperty float x\nproperty float y\nproperty float z\n"
              "property uchar red\nproperty uchar green\nproperty uchar blue\n"
              "element face 0\nproperty list uchar int vertex_indices\nend_header\n").encode()
    with open(path, "wb") as handle:
        handle.write(header)
        handle.truncate(len(header) + count * 15)
    result = run_cli("view", str(path), "--port", str(free_port()), timeout=120)
    assert_one_line_error(result, str(path), "20,000,000,000 vertices", "of memory, more than the")


def serve_until_ready(args: list[str], deadline: float = 120.0) -> str:
    """Run ``splattrain view`` until it prints its address, then stop it with SIGINT: its output."""
    process = subprocess.Popen([sys.executable, "-m", "splattrain", *args], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        end = time.monotonic() + deadline
        assert process.stdout is not None
        while time.monotonic() < end:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "http://" in line:
                break
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return "".join(lines) + rest


def test_colours_out_of_range_are_clipped_with_one_warning_and_no_numpy_warning(tmp_path):
    vertices, faces = quad()
    rows = np.zeros(4, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("red", "<f8"), ("green", "<f8"), ("blue", "<f8")])
    for name, column in zip("xyz", vertices.T):
        rows[name] = column
    rows["red"] = [np.nan, 1e308, -1e308, 0.5]
    rows["green"], rows["blue"] = 0.25, [np.inf, 1.0, 0.0, 2.0]
    path = mesh_ply(tmp_path / "colours.ply", [("float", "x"), ("float", "y"), ("float", "z"), ("double", "red"),
                                               ("double", "green"), ("double", "blue")], rows, faces)
    output = serve_until_ready(["view", str(path), "--port", str(free_port())])
    assert "RuntimeWarning" not in output and "Traceback" not in output, output
    assert output.count("were clipped") == 1, output
    warnings: list[str] = []
    mesh = read_mesh_ply(path, warnings.append)
    np.testing.assert_array_equal(mesh.colors[:, 0], [0, 255, 0, 128])
    np.testing.assert_array_equal(mesh.colors[:, 2], [255, 255, 0, 255])
    assert warnings == [f"{path}: 5 vertex colour values outside [0, 1] were clipped"]


def test_a_mesh_in_range_reads_back_without_a_warning(tmp_path):
    vertices, faces = quad()
    path = tmp_path / "ok.ply"
    write_mesh(path, MeshArrays(vertices, faces, np.full((4, 3), 7, np.uint8)))
    warnings: list[str] = []
    mesh = read_mesh_ply(path, warnings.append)
    assert warnings == [] and (mesh.colors == 7).all()
    np.testing.assert_array_equal(mesh.faces, faces)


def test_a_scene_ply_with_colours_beyond_float32_is_one_line_and_no_numpy_warning(tmp_path):
    from splattrain.io.ply import ply_property_names

    names = ply_property_names(0)
    rows = np.zeros(4, dtype=[(n, "<f8" if n.startswith("f_dc") else "<f4") for n in names])
    rows["x"], rows["opacity"], rows["rot_0"] = np.arange(4), 1.0, 1.0
    rows["f_dc_0"] = [np.nan, 1e308, 0.0, 0.0]
    header = ["ply", "format binary_little_endian 1.0", "element vertex 4"]
    header += [f"property {'double' if n.startswith('f_dc') else 'float'} {n}" for n in names] + ["end_header"]
    path = tmp_path / "scene.ply"
    path.write_bytes(("\n".join(header) + "\n").encode() + rows.tobytes())
    result = run_cli("view", str(path), "--port", str(free_port()))
    assert_one_line_error(result, str(path), "2 of 4 Gaussians hold NaN or infinite values")
