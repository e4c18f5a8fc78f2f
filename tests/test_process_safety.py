"""``splattrain process`` against careless and hostile inputs (through the command line): it never
removes or replaces what it did not write, refuses input and output inside one another, checks
photos before COLMAP sees them, and names a damaged or planted work file in one line."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cli_check import assert_one_line_error, files_of, run_cli
from test_process import CUP, cup_photos

pytestmark = [pytest.mark.slow,  # COLMAP on real photos
              pytest.mark.skipif(not (CUP / "images").is_dir(), reason="the cup capture (../shared/scenes/cup) is absent")]


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    """Eight cup photos (``<root>/photos``) made into a scene (``<root>/scene``) by process."""
    root = tmp_path_factory.mktemp("processed")
    photos = cup_photos(root / "photos", range(1, 9))
    result = run_cli("process", str(photos), str(root / "scene"))
    assert result.returncode == 0, result.stdout + result.stderr
    return root / "scene"


def copy_scene(scene: Path, root: Path) -> Path:
    """The processed scene and its photos copied under ``root`` (``root/scene``, ``root/photos``)."""
    shutil.copytree(scene.parent / "photos", root / "photos")
    return Path(shutil.copytree(scene, root / "scene", symlinks=True))


def png_declaring(path: Path, width: int, height: int) -> Path:
    """A small PNG whose header declares ``width`` x ``height`` pixels (its data holds one row)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(1 + 3 * 64)))
                     + chunk(b"IEND", b""))
    return path


# -- the output folder -------------------------------------------------------------------------------
def test_a_folder_holding_someone_elses_colmap_project_is_refused_and_left_as_it_is(tmp_path):
    """The layout of many COLMAP and nerfstudio projects (images/, sparse/0/, colmap/) is not taken
    for process's own work: nothing in it is replaced or deleted."""
    photos = cup_photos(tmp_path / "photos", range(1, 5))
    project = tmp_path / "project"
    cup_photos(project / "images", range(10, 14))
    (project / "sparse" / "0").mkdir(parents=True)
    (project / "sparse" / "0" / "cameras.bin").write_bytes(b"\x01\x00\x00\x00 someone's cameras")
    (project / "colmap").mkdir()
    (project / "colmap" / "notes.txt").write_text("my matcher settings\n")
    before = files_of(project)
    result = run_cli("process", str(photos), str(project))
    assert_one_line_error(result, str(project), "not empty and was not written by splattrain process")
    assert files_of(project) == before

    # a folder process marked, holding an images/ it did not make: that is not replaced either
    (project / ".splattrain-process").write_text('{"format": "splattrain-process/1", "created": ["colmap"]}\n')
    before = files_of(project)
    result = run_cli("process", str(photos), str(project))
    assert_one_line_error(result, str(project / "images"), "not written by splattrain process")
    assert files_of(project) == before
    (project / ".splattrain-process").write_text('{"created": ["images", "sparse", "colmap"]}\n')  # not process's
    before = files_of(project)
    assert_one_line_error(run_cli("process", str(photos), str(project)), ".splattrain-process",
                          "not a marker splattrain process wrote")
    assert files_of(project) == before


def test_processing_a_scenes_own_photos_into_it_is_refused_and_nothing_is_lost(scene, tmp_path):
    """``process scene/images scene`` (redo a scene from its photos) would replace its own input."""
    before = files_of(scene)
    assert_one_line_error(run_cli("process", str(scene / "images"), str(scene)), str(scene / "images"),
                          "the input is inside the output folder")
    link = tmp_path / "photos_link"
    link.symlink_to(scene / "images", target_is_directory=True)  # the same folder under another name
    assert_one_line_error(run_cli("process", str(link), str(scene)), "the input is inside the output folder")
    assert_one_line_error(run_cli("process", str(scene), str(scene / "colmap" / "out")),
                          "output folder is inside the input folder")
    scene_link = tmp_path / "scene_link"
    scene_link.symlink_to(scene, target_is_directory=True)
    assert_one_line_error(run_cli("process", str(scene.parent / "photos"), str(scene_link)), str(scene_link),
                          "symbolic link")
    assert files_of(scene) == before


def test_a_second_run_moves_the_last_scene_aside_and_keeps_what_it_did_not_write(scene, tmp_path):
    copied = copy_scene(scene, tmp_path)
    (copied / "notes.txt").write_text("shot on a cloudy day\n")  # the user's, beside process's folders
    before = files_of(copied)
    result = run_cli("process", str(tmp_path / "photos"), str(copied), "--mapper", "global")
    assert result.returncode == 0, result.stdout + result.stderr
    (aside,) = tmp_path.glob("scene.old-*")
    assert f"moved to {aside}" in result.stdout
    moved = files_of(aside)
    assert moved and moved == {name: data for name, data in before.items() if name.split("/")[0] in
                               ("images", "sparse", "images_2", "images_4", "images_8")}
    assert (copied / "notes.txt").read_text() == "shot on a cloudy day\n"
    assert sorted(p.name for p in (copied / "images").iterdir()) == [f"{n}.jpg" for n in range(1, 9)]
    assert not (copied / "colmap" / "scene").exists()  # the staging folder is gone


# -- the photos --------------------------------------------------------------------------------------
def test_photos_that_cannot_be_used_are_named_in_one_line_and_skipped(tmp_path):
    """A text file named .jpg, a .jpg link to a text file and a 35-byte PNG declaring 60000 x 60000
    pixels: COLMAP would stop the whole run on them (a traceback, an abort); they are skipped."""
    photos = cup_photos(tmp_path / "photos", range(1, 9))
    (photos / "notes.jpg").write_text("not a photo\n")
    diary = tmp_path / "diary.txt"
    diary.write_text("dear diary\n")
    (photos / "linked.jpg").symlink_to(diary)
    png_declaring(photos / "huge.png", 60000, 60000)
    result = run_cli("process", str(photos), str(tmp_path / "scene"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    warnings = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("warning: skipped")]
    assert len(warnings) == 1, result.stdout + result.stderr
    assert warnings[0].startswith("warning: skipped 3 of 11 images: ")
    assert "huge.png: 60000x60000 pixels, over the limit of 100 megapixels" in warnings[0]
    assert "linked.jpg: not a readable image (cannot identify image file)" in warnings[0]
    assert "notes.jpg: not a readable image (cannot identify image file)" in warnings[0]
    summary = json.loads((tmp_path / "scene" / "colmap" / "summary.json").read_text())
    assert summary["registered"] == 8 and summary["images"] == 11
    assert set(summary["left_out"]) == {"huge.png", "linked.jpg", "notes.jpg"}
    assert diary.read_text() == "dear diary\n"


def test_too_few_usable_photos_stop_in_one_line_naming_them(tmp_path):
    photos = cup_photos(tmp_path / "photos", range(1, 3))
    png_declaring(photos / "huge.png", 60000, 60000)
    Image.fromarray(np.zeros((400, 400, 3), np.uint8)).save(photos / "big.png")
    result = run_cli("process", str(photos), str(tmp_path / "scene"), "--max-megapixels", "0.1")
    line = assert_one_line_error(result, str(photos), "0 usable image(s) of 4", "structure from motion needs at least 3")
    assert "huge.png: 60000x60000 pixels" in line and "big.png: 400x400 pixels" in line
    (photos / "big.png").unlink()
    result = run_cli("process", str(photos), str(tmp_path / "scene"))
    assert_one_line_error(result, "2 usable image(s) of 3", "huge.png: 60000x60000 pixels, over the limit")
    for value in ("0", "nan", "-3"):
        assert_one_line_error(run_cli("process", str(photos), str(tmp_path / "scene"), "--max-megapixels", value),
                              "--max-megapixels")


# -- the work folder ---------------------------------------------------------------------------------
def test_a_linked_work_folder_and_a_vouched_for_database_that_is_not_one_are_refused(scene, tmp_path):
    copied = copy_scene(scene, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "options.json").write_text("the user's own options\n")
    shutil.rmtree(copied / "colmap")
    (copied / "colmap").symlink_to(elsewhere, target_is_directory=True)
    before, outside = files_of(copied), files_of(elsewhere)
    result = run_cli("process", str(tmp_path / "photos"), str(copied))
    assert_one_line_error(result, str(copied / "colmap"), "symbolic link")
    assert files_of(copied) == before and files_of(elsewhere) == outside

    # a database the marker vouches for (its size and hash written in) is still checked before
    # anything writes it: one that is not COLMAP's is named, never deleted
    import sqlite3

    copied = copy_scene(scene, tmp_path / "second")
    db = copied / "colmap" / "database.db"
    for extra in ("database.db-wal", "database.db-shm"):
        (copied / "colmap" / extra).unlink(missing_ok=True)
    for content, complaint in ((b"a spreadsheet, not a database\n", "not a COLMAP database"),
                               (None, "an SQLite database that is not COLMAP's")):
        db.unlink()
        if content is None:
            connection = sqlite3.connect(db)
            connection.execute("CREATE TABLE budget (item TEXT, cost REAL)")
            connection.commit()
            connection.close()
        else:
            db.write_bytes(content)
        marker = json.loads((copied / ".splattrain-process").read_text())
        files = {name: entry for name, entry in marker["files"].items() if (copied / name).is_file()}
        files["colmap/database.db"] = [db.stat().st_size, hashlib.sha256(db.read_bytes()).hexdigest()]
        marker["files"] = files
        (copied / ".splattrain-process").write_text(json.dumps(marker) + "\n")
        before = files_of(copied)
        result = run_cli("process", str(tmp_path / "second" / "photos"), str(copied))
        assert_one_line_error(result, str(db), complaint)
        assert files_of(copied) == before


def test_a_damaged_options_file_is_moved_aside_and_the_database_started_afresh(scene, tmp_path):
    copied = copy_scene(scene, tmp_path)
    options = copied / "colmap" / "options.json"
    options.write_text('{"input": "/somewhere", "camera')  # cut short, as an interrupted write would
    result = run_cli("process", str(scene.parent / "photos"), str(copied))  # the same photos: the database fits
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    (aside,) = tmp_path.glob("scene.old-*")
    assert f"warning: {copied / 'colmap'}: options.json not written by splattrain process, or changed since" \
        in result.stdout
    assert (aside / "colmap" / "options.json").read_text() == '{"input": "/somewhere", "camera'
    assert "reused from the last run" not in result.stdout  # which input the database was made from is unknown
    assert json.loads(options.read_text())["camera"] == "per-image"


def test_a_refined_model_in_the_work_folder_is_moved_aside_on_the_next_run(scene, tmp_path):
    """``colmap/sparse/0`` edited after process wrote it (a model refined in COLMAP's GUI) and a
    file added beside the database: the next run moves both aside, byte for byte, and reuses the
    features and matches it wrote."""
    copied = copy_scene(scene, tmp_path)
    model = copied / "colmap" / "sparse" / "0"
    (model / "points3D.bin").write_bytes((model / "points3D.bin").read_bytes() + b"refined")
    (copied / "colmap" / "notes.txt").write_text("bundle adjusted twice\n")
    refined = {f"colmap/sparse/0/{name}": data for name, data in files_of(model).items()}
    result = run_cli("process", str(scene.parent / "photos"), str(copied))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "8 reused from the last run" in result.stdout and "28 pairs reused from the last run" in result.stdout
    (aside,) = tmp_path.glob("scene.old-*")
    kept = {name: data for name, data in files_of(aside).items() if name.startswith("colmap/")}
    assert kept == {**refined, "colmap/notes.txt": b"bundle adjusted twice\n"}
    assert (copied / "colmap" / "sparse" / "0" / "points3D.bin").read_bytes() != refined["colmap/sparse/0/points3D.bin"]


def test_dot_and_dot_dot_name_the_output_folder_they_stand_for(scene, tmp_path):
    """``process PHOTOS .`` in a scene and ``process PHOTOS ..`` from its ``images_8/``: the folder
    they name is the output (the last scene moved to ``<scene>.old-<time>`` beside it, nothing
    moved into the working folder); input and output inside one another are refused first."""
    photos = scene.parent / "photos"
    for name, cwd_of in ((".", lambda copied: copied), ("..", lambda copied: copied / "images_8")):
        root = tmp_path / ("dot" if name == "." else "dotdot")
        root.mkdir()
        copied = Path(shutil.copytree(scene, root / "scene", symlinks=True))
        before = files_of(copied)
        result = run_cli("process", str(photos), name, cwd=cwd_of(copied))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "28 pairs reused from the last run" in result.stdout
        (aside,) = root.glob("scene.old-*")
        assert files_of(aside) == {path: data for path, data in before.items() if path.split("/")[0] in
                                   ("images", "sparse", "images_2", "images_4", "images_8")}
        assert sorted(p.name for p in (copied / "images_8").iterdir()) == [f"{n}.jpg" for n in range(1, 9)]
        assert sorted(p.name for p in root.iterdir()) == ["scene", aside.name]
    copied = tmp_path / "dot" / "scene"
    before = files_of(copied)
    assert_one_line_error(run_cli("process", ".", "..", cwd=copied / "images"), "the input is inside the output")
    assert_one_line_error(run_cli("process", "..", ".", cwd=copied / "images"), "output folder is inside the input")
    assert files_of(copied) == before


def noise_video(path: Path, frames: int = 6, size: tuple = (160, 120)) -> Path:
    """A short video of unrelated noise frames: frames to extract, nothing to register."""
    import imageio_ffmpeg

    rng = np.random.default_rng(0)
    writer = imageio_ffmpeg.write_frames(str(path), size, fps=3, quality=9, macro_block_size=8)
    writer.send(None)
    for _ in range(frames):
        writer.send(np.ascontiguousarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)))
    writer.close()
    return path


def test_a_damaged_frame_manifest_is_moved_aside_with_its_frames_and_they_are_extracted_again(tmp_path):
    video = noise_video(tmp_path / "noise.mp4")
    scene = tmp_path / "scene"
    first = run_cli("process", str(video), str(scene))
    assert_one_line_error(first, str(video), "could be registered")
    manifest = scene / "colmap" / "frames" / "frames.json"
    assert json.loads(manifest.read_text())["report"]["kept"] == 6
    manifest.write_text('{"key": {"video": ')
    frames = files_of(scene / "colmap" / "frames")
    result = run_cli("process", str(video), str(scene))
    assert "Traceback" not in result.stdout + result.stderr
    assert f"warning: {scene / 'colmap'}: frames not written by splattrain process, or changed since" in result.stdout
    (aside,) = tmp_path.glob("scene.old-*")
    assert files_of(aside / "colmap" / "frames") == frames  # the frames stay with their manifest
    assert result.stderr.strip().splitlines()[-1] == first.stderr.strip().splitlines()[-1]
    assert json.loads(manifest.read_text())["report"]["kept"] == 6


def test_a_large_video_is_shrunk_while_it_is_decoded(tmp_path):
    """A 52 KB video of 60 frames of 4096 x 4096: kept at full size until the end, its frames took
    3 GB (a numpy allocation traceback under a 2 GB address space); ffmpeg now shrinks each frame
    as it decodes it and each stretch's frame is written as the stretch ends."""
    import resource
    import subprocess
    import sys

    import imageio_ffmpeg

    from conftest import REPO

    video = tmp_path / "big.mp4"
    subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-loglevel", "error", "-f", "lavfi", "-i",
                    "color=c=gray:size=4096x4096:rate=30", "-frames:v", "60", "-c:v", "libx264", "-preset", "ultrafast",
                    "-pix_fmt", "yuv420p", str(video)], check=True, timeout=120)
    assert video.stat().st_size < 200_000

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    result = subprocess.run([sys.executable, "-m", "splattrain", "process", str(video), str(tmp_path / "scene"),
                             "--max-size", "64"], cwd=REPO, capture_output=True, text=True, timeout=300,
                            preexec_fn=cap)
    assert "60/60 frames decoded" in result.stdout, result.stdout + result.stderr
    frames = sorted((tmp_path / "scene" / "colmap" / "frames").glob("frame_*.jpg"))
    assert len(frames) == 60 and Image.open(frames[0]).size == (64, 64)
    assert_one_line_error(result, str(video), "only 0 of 60 images could be registered")  # one grey picture
