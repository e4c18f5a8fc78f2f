"""User errors through the command line: exit code 2 and one line naming the culprit, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli_check import assert_one_line_error, run_cli, trained, write_config  # noqa: F401
from conftest import REPO


# -- output paths that cannot be written: one line naming the path -------------------------
def test_unwritable_output_paths_are_one_line_errors(tmp_path, trained):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    config = write_config(tmp_path, tmp_path / "unused")
    cases = [
        (("fit", "--config", str(config), f"output_dir={blocker}/run"), ["not a directory", str(blocker)]),
        (("fit", "--config", str(config), "output_dir=/proc/splattrain_run"), ["/proc/splattrain_run"]),
        (("export", str(trained), "--out", str(tmp_path)), ["is a directory", str(tmp_path)]),
        (("export", str(trained), "--out", f"{blocker}/scene.ply"), ["not a directory", str(blocker)]),
        (("export", str(trained), "--out", "/proc/scene.ply"), ["/proc/scene.ply"]),
        (("schedule", "--config", str(config), "--out", "/proc/lr.png"), ["/proc/lr.png"]),
    ]
    for args, fragments in cases:
        assert_one_line_error(run_cli(*args), *fragments)


def _fill(folder: Path, leave: int) -> None:
    """Fill the file system of ``folder`` until about ``leave`` bytes are free."""
    import os

    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    with open(folder / "filler", "wb") as handle:
        handle.write(b"\0" * max(free - leave, 0))


def test_full_disk_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, trained):
    """A 1 MiB tmpfs holds a copy of the run; it is filled so that the next checkpoint cannot be
    written. (Mounting needs root, which the CI machine has.)"""
    import shutil

    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True)
    assert mounted.returncode == 0, f"cannot mount a tmpfs: {mounted.stderr!r}"
    try:
        run = disk / "run"
        shutil.copytree(trained, run)
        before = (run / "ckpt" / "step_000002.pt").read_bytes()
        config = write_config(tmp_path, run, steps=4, extra="default_hooks:\n  checkpoint: {interval: 1}\n")
        _fill(disk, leave=24 * 1024)
        result = run_cli("fit", "--config", str(config), "--resume", "--quiet")
        line = assert_one_line_error(result, "no space left on device while writing", str(run / "ckpt"))
        assert ".tmp" not in line
        assert (run / "ckpt" / "step_000002.pt").read_bytes() == before
        assert not list((run / "ckpt").glob(".*.tmp"))
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_read_only_output_dir_is_one_line(tmp_path, trained):
    """A read-only file system (a tmpfs mounted ro: chmod does not stop root)."""
    disk = tmp_path / "ro"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(disk)], capture_output=True)
    assert mounted.returncode == 0, f"cannot mount a tmpfs: {mounted.stderr!r}"
    try:
        config = write_config(tmp_path, disk / "run")
        assert_one_line_error(run_cli("fit", "--config", str(config)), "read-only file system", str(disk / "run"))
        assert_one_line_error(run_cli("export", str(trained), "--out", str(disk / "scene.ply")),
                              "read-only file system", str(disk))
    finally:
        subprocess.run(["umount", str(disk)], check=True)


# -- config values refused before training, naming the key / file / hook ------------------
HOOK_THAT_FAILS = '''
from splattrain import HOOKS, Hook

@HOOKS.register()
class BrokenHook(Hook):
    def __init__(self):
        super().__init__()
        raise ValueError("cannot start: no GPU budget")
'''


@pytest.mark.parametrize("override, fragment", [
    ("optim.means_lr=nan", "optim.means_lr"), ("optim.scales_lr=inf", "optim.scales_lr"),
    ("optim.opacities_lr=-0.1", "optim.opacities_lr"), ("loss.ssim_lambda=1.5", "loss.ssim_lambda"),
    ("loss.terms=[{type: l1, weight: -1}]", "loss.terms[0].weight"), ("model.sh_degree=5", "model.sh_degree"),
    ("model.init.num_points=0", "model.init.num_points"), ("output_dir=''", "output_dir"),
])
def test_bad_config_values_are_refused_before_training(tmp_path, override, fragment):
    config = write_config(tmp_path, tmp_path / "run")
    assert_one_line_error(run_cli("fit", "--config", str(config), override), fragment, str(config))
    assert not (tmp_path / "run").exists()


def test_bad_config_files_modules_and_hooks_are_named(tmp_path):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    assert_one_line_error(run_cli("fit", "--config", str(binary)), str(binary), "not UTF-8")
    (tmp_path / "broken_syntax.py").write_text("def oops(:\n")
    (tmp_path / "raises.py").write_text("x = 1\nraise RuntimeError('plugin refuses to load')\n")
    (tmp_path / "broken_hook.py").write_text(HOOK_THAT_FAILS)
    for module, fragments in [
        ("broken_syntax", ["broken_syntax", "syntax error", "line 1"]),
        ("raises", ["raises", "RuntimeError", "line 2", "plugin refuses to load"]),
        ("raises.py", ["raises.py", "plugin refuses to load"]),
    ]:
        config = write_config(tmp_path, tmp_path / "run", extra=f"imports: [{module}]")
        assert_one_line_error(run_cli("fit", "--config", str(config)), *fragments)
    config = write_config(tmp_path, tmp_path / "run", extra="imports: [broken_hook]\ncustom_hooks: [{type: BrokenHook}]")
    assert_one_line_error(run_cli("fit", "--config", str(config)), "BrokenHook", "no GPU budget")
    assert not (tmp_path / "run").exists()


# -- render options out of range ----------------------------------------------------------
@pytest.mark.parametrize("option, value", [("--frames", "0"), ("--frames", "-5"), ("--fps", "0"), ("--fps", "-10")])
def test_render_frames_and_fps_out_of_range(tmp_path, trained, option, value):
    result = run_cli("render", str(trained), "--path", "orbit", option, value, "--out", str(tmp_path / "r"))
    assert_one_line_error(result, option, value)
    assert not (tmp_path / "r").exists()


# -- Ctrl-C while the command line starts -------------------------------------------------
def test_ctrl_c_during_start_up_exits_130_quietly(tmp_path, trained):
    """SIGINT while torch's libraries are being loaded (seen in /proc/PID/maps), and a little later."""
    import signal
    import time

    for extra_delay in (0.0, 0.2, 0.6):
        process = subprocess.Popen([sys.executable, "-m", "splattrain", "eval", str(trained)], cwd=REPO,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        maps = Path(f"/proc/{process.pid}/maps")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None and "libtorch" not in maps.read_text():
            time.sleep(0.005)
        time.sleep(extra_delay)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
        assert process.returncode == 130, (extra_delay, err)
        assert "Traceback" not in out + err and "KeyboardInterrupt" not in err, (extra_delay, err)
        # one line; on a loaded machine PyTorch's import may outlast the 5 s a signal waits for a safe point
        assert err.strip() in ("stopped by SIGINT", "stopped by SIGINT: no safe point came within 5 s; ended at once"), err


# -- data: images of every PNG mode, a PLY with NaN ---------------------------------------
def _png16_rgb(path: Path, pixels) -> None:
    """A 16-bit RGB PNG (Pillow cannot write one)."""
    import struct
    import zlib

    import numpy as np

    data = np.asarray(pixels, dtype=">u2")
    height, width, _ = data.shape
    raw = b"".join(b"\0" + row.tobytes() for row in data)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
                     + chunk(b"IEND", b""))


def test_images_of_every_mode_are_scaled_to_8_bit(tmp_path):
    import numpy as np
    from PIL import Image

    from splattrain.data.images import read_image

    grey16 = np.array([[0, 257 * 10, 257 * 128, 65535]], dtype=np.uint16)
    Image.fromarray(grey16).save(tmp_path / "grey16.png")
    assert Image.open(tmp_path / "grey16.png").mode.startswith("I")
    assert read_image(tmp_path / "grey16.png")[0, :, 0].tolist() == [0, 10, 128, 255]
    _png16_rgb(tmp_path / "rgb16.png", [[[0, 257 * 50, 65535], [257 * 200, 0, 257 * 7]]])
    assert read_image(tmp_path / "rgb16.png").tolist() == [[[0, 50, 255], [200, 0, 7]]]
    Image.fromarray(np.array([[0, 77, 255]], dtype=np.uint8), "L").save(tmp_path / "grey8.png")
    assert read_image(tmp_path / "grey8.png")[0].tolist() == [[0, 0, 0], [77, 77, 77], [255, 255, 255]]
    Image.fromarray(np.array([[[77, 128]]], dtype=np.uint8), "LA").save(tmp_path / "la.png")
    assert read_image(tmp_path / "la.png")[0, 0].tolist() == [77, 77, 77, 128]
    palette = Image.new("P", (2, 1))
    palette.putpalette([10, 20, 30, 200, 100, 50])
    palette.putdata([0, 1])
    palette.save(tmp_path / "palette.png")
    assert read_image(tmp_path / "palette.png")[0].tolist() == [[10, 20, 30], [200, 100, 50]]
    Image.new("CMYK", (1, 1), (0, 255, 0, 0)).save(tmp_path / "cmyk.jpg", quality=100)
    red, green, blue = read_image(tmp_path / "cmyk.jpg")[0, 0].tolist()
    assert red > 200 and green < 60 and blue > 200  # magenta


def test_ply_with_nan_rows_is_refused_naming_the_count(tmp_path, trained):
    export = run_cli("export", str(trained), "--out", str(tmp_path / "scene.ply"))
    assert export.returncode == 0, export.stderr
    from splattrain.io.ply import read_ply_vertices

    vertices = read_ply_vertices(tmp_path / "scene.ply").copy()
    vertices["x"][3] = float("nan")
    vertices["opacity"][7] = float("inf")
    raw = (tmp_path / "scene.ply").read_bytes()
    header = raw[: raw.index(b"end_header\n") + len(b"end_header\n")]
    (tmp_path / "bad.ply").write_bytes(header + vertices.tobytes())
    config = write_config(tmp_path, tmp_path / "run", extra="")
    result = run_cli("fit", "--config", str(config), f"model.init.ply={tmp_path / 'bad.ply'}", "model.sh_degree=1")
    assert_one_line_error(result, str(tmp_path / "bad.ply"), f"2 of {len(vertices)} Gaussians")



# -- save_best: loss is refused (validation measures no loss) ------------------------------
def test_save_best_loss_is_refused(tmp_path):
    config = write_config(tmp_path, tmp_path / "run", extra="default_hooks:\n  checkpoint: {save_best: loss}\n")
    assert_one_line_error(run_cli("fit", "--config", str(config)), "save_best 'loss'", "psnr")
    assert not (tmp_path / "run").exists()
