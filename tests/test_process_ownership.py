"""``splattrain process`` owns exactly what it made, through the command line, on small generated
photos (no registration needed: each defect shows before or without it): its work folder is
recorded with sizes and hashes and anything else there is moved aside, one process holds an
output folder at a time, SIGTERM during a COLMAP stage is handled like SIGINT, and a deeply
nested input is refused before anything is written."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cli_check import assert_one_line_error, files_of, run_cli
from conftest import REPO

pytest.importorskip("pycolmap")
MARKER = ".splattrain-process"


def noise_photos(folder: Path, count: int, size: tuple = (320, 240)) -> Path:
    """``count`` unrelated noise photos: features to extract and match, nothing to register."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return folder


def start_process(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "splattrain", "process", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, proc: subprocess.Popen, what: str, seconds: float = 120) -> None:
    """Poll ``condition()`` until it holds; fail when ``proc`` ended first or the deadline passed."""
    deadline = time.monotonic() + seconds
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"{what} did not happen: {out}{err}")
        time.sleep(0.01)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def moved_aside(out: Path) -> dict:
    """Files of the one ``<out>.old-<time>`` folder beside ``out`` (path -> bytes)."""
    (aside,) = out.parent.glob(f"{out.name}.old-*")
    return files_of(aside)


# -- the work folder ---------------------------------------------------------------------------------
def test_a_planted_marker_naming_the_work_folder_deletes_nothing_in_it(tmp_path):
    """A marker of process's format naming ``colmap`` (planted, or left by an earlier version) no
    longer hands it the folder: a refined model in ``colmap/sparse/0``, files where process
    stages its scene and undistorts, and a database are moved aside byte for byte, never deleted
    or written into."""
    photos = noise_photos(tmp_path / "photos", 4)
    out = tmp_path / "scene"
    work = out / "colmap"
    (work / "sparse" / "0").mkdir(parents=True)
    for name in ("cameras.bin", "images.bin", "points3D.bin"):
        (work / "sparse" / "0" / name).write_bytes(f"my refined {name}".encode())
    (work / "scene").mkdir()
    (work / "scene" / "keep.txt").write_text("my notes\n")
    (work / "undistorted").mkdir()
    (work / "undistorted" / "crop.txt").write_text("my crop\n")
    connection = sqlite3.connect(work / "database.db")
    connection.execute("CREATE TABLE cameras (camera_id INTEGER)")
    connection.execute("CREATE TABLE images (image_id INTEGER, name TEXT)")
    connection.commit()
    connection.close()
    (out / MARKER).write_text('{"format": "splattrain-process/1", "created": ["colmap"]}\n')
    planted = files_of(work)

    result = run_cli("process", str(photos), str(out))
    assert_one_line_error(result, "could be registered")  # noise: the stages ran, mapping found nothing
    assert "moved to" in result.stdout and "not written by splattrain process" in result.stdout
    assert moved_aside(out) == {f"colmap/{name}": data for name, data in planted.items()}


def test_the_marker_records_the_work_files_and_a_changed_or_added_one_is_moved_aside(tmp_path):
    photos = noise_photos(tmp_path / "photos", 4)
    out = tmp_path / "scene"
    assert_one_line_error(run_cli("process", str(photos), str(out)), "could be registered")
    marker = json.loads((out / MARKER).read_text())
    on_disk = {p.relative_to(out).as_posix(): p for p in (out / "colmap").rglob("*") if p.is_file()}
    assert "colmap/database.db" in on_disk and "colmap/options.json" in on_disk
    assert marker["files"] == {name: [p.stat().st_size, sha256(p)] for name, p in on_disk.items()}

    # a run with nothing changed moves nothing aside and reuses the features
    again = run_cli("process", str(photos), str(out))
    assert "4 reused from the last run" in again.stdout, again.stdout + again.stderr
    assert not list(tmp_path.glob("scene.old-*"))

    options = out / "colmap" / "options.json"
    edited = options.read_bytes().replace(b'"camera"', b'"camera" ')  # the user's edit: same meaning, other bytes
    options.write_bytes(edited)
    (out / "colmap" / "sparse" / "0").mkdir(parents=True)
    (out / "colmap" / "sparse" / "0" / "points3D.bin").write_bytes(b"a model made elsewhere")
    result = run_cli("process", str(photos), str(out))
    assert_one_line_error(result, "could be registered")
    assert moved_aside(out) == {"colmap/options.json": edited,
                                "colmap/sparse/0/points3D.bin": b"a model made elsewhere"}
    assert json.loads(options.read_text())["camera"] == "per-image"  # written again


# -- one process per output folder ------------------------------------------------------------------
def test_a_second_process_on_the_same_output_stops_in_one_line_and_changes_nothing(tmp_path):
    photos = noise_photos(tmp_path / "photos", 4)
    out = tmp_path / "scene"
    first = start_process(str(photos), str(out))
    lock = out / ".splattrain.lock"
    try:
        wait_for(lambda: lock.is_file() and lock.read_text().strip() == str(first.pid), first, "the first run's lock")
        os.kill(first.pid, signal.SIGSTOP)  # held where it is: the lock stays taken
        before = files_of(out)
        second = run_cli("process", str(photos), str(out))
        assert_one_line_error(second, str(out), f"in use by process {first.pid}", "another output folder")
        assert files_of(out) == before
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGCONT)
    out_text, err_text = first.communicate(timeout=300)
    assert first.returncode == 2 and "could be registered" in err_text, out_text + err_text
    assert not lock.exists()


# -- stop signals ------------------------------------------------------------------------------------
def test_sigterm_during_a_colmap_stage_stops_cleanly_and_the_next_run_resumes(tmp_path):
    """pycolmap's import installs glog's failure handler for SIGTERM (a native stack dump, no
    cancellation); SIGTERM is the command's, like SIGINT: the stage is cancelled, exit 143."""
    photos = noise_photos(tmp_path / "photos", 16)
    out = tmp_path / "scene"
    proc = start_process(str(photos), str(out))
    from splattrain.process.database import images_with_features

    wait_for(lambda: any(images_with_features(out / "colmap" / "database.db").values()), proc,
             "the first photo's features")
    os.kill(proc.pid, signal.SIGTERM)
    out_text, err_text = proc.communicate(timeout=120)
    assert proc.returncode == 143, out_text + err_text
    assert err_text.strip().splitlines() == ["stopped by SIGTERM"], err_text
    assert "SIGTERM received" not in out_text + err_text
    result = run_cli("process", str(photos), str(out))
    assert "reused from the last run" in result.stdout, result.stdout + result.stderr
    assert_one_line_error(result, "could be registered")
    assert not list(tmp_path.glob("scene.old-*"))  # what the stopped run left was recorded as its own


# -- the input ---------------------------------------------------------------------------------------
def test_a_deeply_nested_input_is_refused_before_anything_is_written(tmp_path):
    photos = noise_photos(tmp_path / "photos", 3)
    deepest = photos
    for _ in range(1500):
        deepest = deepest / "d"
        deepest.mkdir()
    try:
        result = run_cli("process", str(photos), str(tmp_path / "scene"))
        assert_one_line_error(result, str(photos), "nested more than")
        assert not (tmp_path / "scene").exists()
    finally:
        while deepest != photos:  # removed from the bottom: the cleanup recurses no deeper than the test
            deepest.rmdir()
            deepest = deepest.parent
