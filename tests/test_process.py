"""``splattrain process``: photos and a video to a COLMAP scene that ``fit`` trains (pycolmap on CPU).

Small sets of the cup's real photos keep each run to seconds; the full 77-photo run and the
pose comparison with the shipped model are in benchmarks/bench_process.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFilter

from cli_check import assert_one_line_error, run_cli
from conftest import REPO, SHARED

CUP = SHARED / "scenes" / "cup"
pytestmark = [pytest.mark.slow,  # COLMAP on real photos
              pytest.mark.skipif(not (CUP / "images").is_dir(), reason="the cup capture (../shared/scenes/cup) is absent")]


def cup_photos(folder: Path, numbers: range) -> Path:
    """Consecutive cup photos (their capture order) copied into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for n in numbers:
        (folder / f"{n}.jpg").write_bytes((CUP / "images" / f"{n}.jpg").read_bytes())
    return folder


@pytest.fixture(scope="module")
def processed(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """Eight cup photos through ``splattrain process`` (input folder, output folder, result)."""
    root = tmp_path_factory.mktemp("process")
    photos = cup_photos(root / "photos", range(1, 9))
    result = run_cli("process", str(photos), str(root / "scene"))
    assert result.returncode == 0, result.stdout + result.stderr
    return photos, root / "scene", result


def test_photos_become_a_scene_in_the_standard_layout(processed) -> None:
    from splattrain.data.colmap import load_colmap
    from splattrain.data.images import resize_image, scaled_size

    photos, scene, result = processed
    summary = json.loads((scene / "colmap" / "summary.json").read_text())
    assert summary["registered"] == 8 and summary["left_out"] == {}
    assert 0 < summary["mean_reprojection_error_px"] < 1.0
    assert summary["points"] > 300
    assert "device: CPU" in result.stdout and "registered images" in result.stdout
    assert f"data.path={scene}" in result.stdout
    names = sorted(p.name for p in (scene / "images").iterdir())
    assert names == sorted(p.name for p in photos.iterdir())
    for factor in (2, 4, 8):
        for name in names:
            big, small = Image.open(scene / "images" / name), Image.open(scene / f"images_{factor}" / name)
            assert small.size == scaled_size(*big.size, factor)
    # the shrunk photos are what the reader would make at load, up to a near-lossless JPEG
    photo = np.asarray(Image.open(scene / "images" / "1.jpg").convert("RGB"))
    at_load = resize_image(photo, scaled_size(photo.shape[1], photo.shape[0], 4)).astype(np.float64)
    written = np.asarray(Image.open(scene / "images_4" / "1.jpg").convert("RGB"), np.float64)
    assert 10 * np.log10(255.0**2 / ((at_load - written) ** 2).mean()) > 50
    data = load_colmap(scene)  # splattrain's own reader: pinhole cameras, every image used
    assert len(data.train) + len(data.test) == 8
    assert data.points is not None and len(data.points) == summary["points"]


def test_each_photo_gets_its_own_pinhole_camera_and_is_copied_as_it_is(processed) -> None:
    pycolmap = pytest.importorskip("pycolmap")
    photos, scene, result = processed
    model = pycolmap.Reconstruction(scene / "sparse" / "0")
    assert len(model.cameras) == 8 and len({image.camera_id for image in model.images.values()}) == 8
    assert {c.model.name for c in model.cameras.values()} == {"SIMPLE_PINHOLE"}
    summary = json.loads((scene / "colmap" / "summary.json").read_text())
    assert summary["options"]["camera"] == "per-image" and summary["options"]["camera_model"] == "SIMPLE_PINHOLE"
    assert not summary["undistorted"] and summary["max_distortion_px"] < 1e-6
    assert "per-image camera (SIMPLE_PINHOLE)" in result.stdout and "copied as they are" in result.stdout
    assert (scene / "images" / "1.jpg").read_bytes() == (photos / "1.jpg").read_bytes()


def test_one_shared_camera_fits_the_lens_and_the_photos_are_undistorted(tmp_path: Path) -> None:
    pycolmap = pytest.importorskip("pycolmap")
    photos = cup_photos(tmp_path / "photos", range(1, 9))
    scene = tmp_path / "scene"
    result = run_cli("process", str(photos), str(scene), "--camera", "single")
    assert result.returncode == 0, result.stdout + result.stderr
    model = pycolmap.Reconstruction(scene / "sparse" / "0")
    assert len(model.cameras) == 1 and {c.model.name for c in model.cameras.values()} <= {"PINHOLE", "SIMPLE_PINHOLE"}
    summary = json.loads((scene / "colmap" / "summary.json").read_text())
    assert summary["options"]["camera_model"] == "SIMPLE_RADIAL"
    # a phone lens: SIMPLE_RADIAL moves the border by several pixels, so the photos were resampled
    assert summary["undistorted"] and summary["max_distortion_px"] > 0.5
    assert "undistorted to pinhole" in result.stdout
    camera = next(iter(model.cameras.values()))
    assert Image.open(scene / "images" / "1.jpg").size == (camera.width, camera.height)


def test_auto_cameras_are_one_per_photo_and_one_for_a_video() -> None:
    from splattrain.process.sfm import pick_cameras

    assert pick_cameras("auto", "auto", "images") == ("per-image", "SIMPLE_PINHOLE")
    assert pick_cameras("auto", "auto", "video") == ("single", "SIMPLE_RADIAL")
    assert pick_cameras("per-folder", "auto", "images") == ("per-folder", "SIMPLE_RADIAL")
    assert pick_cameras("auto", "OPENCV", "images") == ("per-image", "OPENCV")


def test_fit_trains_the_processed_scene(processed, tmp_path: Path) -> None:
    _, scene, _ = processed
    result = run_cli("fit", "--config", "configs/colmap.yaml", f"data.path={scene}", "trainer.max_steps=20",
                     "data.downscale=8", f"output_dir={tmp_path / 'run'}", "metrics.lpips=false", "writers=[]",
                     "--quiet", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["cc_psnr"] > 12  # colour-corrected: 20 steps leave the exposure unfitted


def test_a_second_run_reuses_features_and_matches_with_the_global_mapper(processed) -> None:
    _, scene, _ = processed
    photos = scene.parent / "photos"
    before = (scene / "colmap" / "database.db").stat().st_size
    result = run_cli("process", str(photos), str(scene), "--mapper", "global")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "8 reused from the last run" in result.stdout
    assert "28 pairs reused from the last run" in result.stdout
    assert (scene / "colmap" / "database.db").stat().st_size == before
    summary = json.loads((scene / "colmap" / "summary.json").read_text())
    assert summary["registered"] == 8 and summary["options"]["mapper"] == "global"
    assert summary["mean_reprojection_error_px"] < 1.0


def test_fit_on_bare_photos_names_the_process_command(processed) -> None:
    photos, _, _ = processed
    result = run_cli("fit", "--config", "configs/colmap.yaml", f"data.path={photos}")
    assert_one_line_error(result, str(photos), "no camera poses", f"splattrain process {photos} ")


def blurred_video(path: Path, numbers: range, copies: int = 3) -> list[np.ndarray]:
    """A video of cup photos, each held for ``copies`` frames of which only the middle one is
    sharp; returns the sharp frames in order."""
    import imageio_ffmpeg

    sharp = []
    writer = imageio_ffmpeg.write_frames(str(path), (800, 600), fps=copies, quality=9, macro_block_size=8)
    writer.send(None)
    for n in numbers:
        photo = Image.open(CUP / "images" / f"{n}.jpg").convert("RGB")
        blurry = np.asarray(photo.filter(ImageFilter.GaussianBlur(3)))
        frames = [blurry] * copies
        frames[copies // 2] = np.asarray(photo)
        sharp.append(np.asarray(photo).astype(np.float32))
        for frame in frames:
            writer.send(np.ascontiguousarray(frame))
    writer.close()
    return sharp


def test_video_frames_keep_the_sharpest_and_become_a_scene(tmp_path: Path) -> None:
    video = tmp_path / "walk.mp4"
    sharp = blurred_video(video, range(1, 10))
    result = run_cli("process", str(video), str(tmp_path / "scene"), "--frames", "9")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "27/27 frames decoded" in result.stdout and "sequential matching" in result.stdout
    kept = sorted((tmp_path / "scene" / "colmap" / "frames").glob("frame_*.jpg"))
    assert len(kept) == 9
    for frame, original in zip(kept, sharp):  # each kept frame is the sharp one of its three
        error = np.abs(np.asarray(Image.open(frame), np.float32) - original).mean()
        assert error < 4.0, (frame.name, error)
    summary = json.loads((tmp_path / "scene" / "colmap" / "summary.json").read_text())
    assert summary["registered"] >= 8 and summary["options"]["matcher"] == "sequential"
    assert summary["options"]["camera"] == "single"  # one lens, one zoom: one camera for the frames
    assert len(list((tmp_path / "scene" / "images_4").iterdir())) == summary["registered"]


def test_sharpness_drops_with_blur() -> None:
    from splattrain.process.frames import sharpness

    photo = Image.open(CUP / "images" / "1.jpg").convert("RGB")
    scores = [sharpness(np.asarray(photo.filter(ImageFilter.GaussianBlur(r)))) for r in (0, 1, 2, 4)]
    assert scores == sorted(scores, reverse=True) and scores[-1] < scores[0] / 10


def test_bad_inputs_stop_with_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(run_cli("process", str(empty), str(tmp_path / "a")), str(empty), "no images found")
    assert_one_line_error(run_cli("process", str(tmp_path / "nothing"), str(tmp_path / "b")), "input not found")
    fake = tmp_path / "clip.mp4"
    fake.write_text("not a video")
    assert_one_line_error(run_cli("process", str(fake), str(tmp_path / "c")), str(fake), "not a readable video")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    photos = cup_photos(tmp_path / "photos", range(1, 4))
    assert_one_line_error(run_cli("process", str(photos), str(taken)), str(taken), "not empty")
    assert_one_line_error(run_cli("process", str(photos), str(photos / "out")), "inside the input folder")
    assert_one_line_error(run_cli("process", str(photos), str(tmp_path / "d"), "--frames", "1"), "--frames")


def test_unrelated_images_are_too_few_to_register(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    noise = tmp_path / "noise"
    noise.mkdir()
    for i in range(4):  # textured but unrelated: features, no consistent geometry
        Image.fromarray(rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)).save(noise / f"{i}.png")
    line = assert_one_line_error(run_cli("process", str(noise), str(tmp_path / "out")), str(noise))
    assert "of 4 images could be registered (3 needed)" in line


def test_without_the_process_extra_the_command_names_it(tmp_path: Path) -> None:
    photos = cup_photos(tmp_path / "photos", range(1, 4))
    code = ("import sys; sys.modules['pycolmap'] = None; from splattrain.cli import main; "
            f"sys.exit(main(['process', {str(photos)!r}, {str(tmp_path / 'out')!r}]))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert_one_line_error(result, "pip install 'splattrain[process]'", "pycolmap")


def test_ctrl_c_stops_cleanly_and_the_next_run_resumes(tmp_path: Path) -> None:
    photos = cup_photos(tmp_path / "photos", range(20, 28))
    scene = tmp_path / "scene"
    proc = subprocess.Popen([sys.executable, "-m", "splattrain", "process", str(photos), str(scene)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    from splattrain.process.database import images_with_features

    deadline = time.monotonic() + 120  # until the first photo's features are in: extraction is under way
    while not any(images_with_features(scene / "colmap" / "database.db").values()):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and "stopped by SIGINT" in err
    assert not (scene / "sparse").exists()
    result = run_cli("process", str(photos), str(scene))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reused from the last run" in result.stdout  # the stopped run recorded its database as its own
    assert not list(tmp_path.glob("scene.old-*"))
    assert json.loads((scene / "colmap" / "summary.json").read_text())["registered"] == 8


def test_disconnected_models_keep_the_largest_and_say_so(tmp_path: Path) -> None:
    # mirrored photos match one another but not the originals (SIFT is not mirror-invariant):
    # two scenes that share no match, so mapping finds two models
    photos = cup_photos(tmp_path / "photos", range(1, 13))
    for n in range(30, 40):
        Image.open(CUP / "images" / f"{n}.jpg").transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(
            photos / f"mirrored_{n}.jpg", quality=95)
    result = run_cli("process", str(photos), str(tmp_path / "scene"))
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "scene" / "colmap" / "summary.json").read_text())
    assert summary["models"] == 2, summary
    assert "disconnected models" in result.stdout and "kept the largest" in result.stdout
    assert summary["registered"] >= 11
    kept = {p.name for p in (tmp_path / "scene" / "images").iterdir()}
    assert all(not name.startswith("mirrored_") for name in kept)
    assert all(why.startswith("in a smaller, disconnected model") for name, why in summary["left_out"].items()
               if name.startswith("mirrored_"))
