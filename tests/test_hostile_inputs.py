"""Hostile and careless input through the real command line: no code runs from a file a user
is sent, no run is mixed or lost, and every user error is one line with exit code 2."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import DEMO, REPO
from splattrain.checkpoint import FORMAT


def run_cli(*args: str, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "splattrain", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit 2, one ``error:`` line on stderr holding every fragment, no traceback."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert "weights_only=False" not in lines[0]
    return lines[0]


def config_text(run_dir: Path, steps: int = 2, extra: str = "") -> str:
    """The demo scene at 16x16 with the PyTorch renderer: a fit of a few steps takes seconds."""
    return f"""
name: tiny
output_dir: {run_dir}
data:
  path: {DEMO}
  downscale: 8
renderer:
  type: torch
trainer:
  max_steps: {steps}
  val_interval: 0
model:
  sh_degree: 1
  init:
    num_points: 100
metrics:
  lpips: false
writers: []
{extra}
"""


def write_config(folder: Path, run_dir: Path, steps: int = 2, extra: str = "", name: str = "cfg.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(config_text(run_dir, steps, extra))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished 2-step run (its config at run/../cfg.yaml)."""
    root = tmp_path_factory.mktemp("trained")
    config = write_config(root, root / "run")
    result = run_cli("fit", "--config", str(config), "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    return root / "run"


class _WritesFile:
    """Unpickling this writes a file: what a crafted checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('code ran')",)


def _crafted_checkpoints(folder: Path, marker: Path) -> list[Path]:
    """A checkpoint with a valid header and checksum whose payload runs code, and a bare pickle."""
    buffer = io.BytesIO()
    torch.save({"step": 1, "config": {}, "sh_degree": 0, "gaussians": _WritesFile(marker)}, buffer)
    payload = buffer.getvalue()
    wrapped = folder / "wrapped.pt"
    torch.save({"format": FORMAT, "sha256": hashlib.sha256(payload).hexdigest(), "payload": payload}, wrapped)
    bare = folder / "bare.pt"
    torch.save({"format": FORMAT, "payload": _WritesFile(marker)}, bare)
    return [wrapped, bare]


# -- 1. a crafted checkpoint never runs code ----------------------------------------------------
@pytest.mark.parametrize("command", ["eval", "export", "render", "fit"])
def test_crafted_checkpoint_runs_no_code(tmp_path, trained, command):
    marker = tmp_path / "pwned.txt"
    for crafted in _crafted_checkpoints(tmp_path, marker):
        if command == "fit":
            config = write_config(tmp_path, tmp_path / "run")
            result = run_cli("fit", "--config", str(config), "--resume", str(crafted))
        else:
            result = run_cli(command, str(crafted), "--out", str(tmp_path / "out"))
        line = assert_one_line_error(result, str(crafted))
        assert "builtins.exec" in line or "not load" in line, line
        assert not marker.exists()
    assert not (tmp_path / "run" / "config.yaml").exists()


def test_old_format_checkpoint_is_refused_in_one_line(tmp_path, trained):
    """A 0.1.0 checkpoint stored numpy's RNG state as an ndarray, which is not plain data."""
    import numpy as np

    state = torch.load(io.BytesIO(torch.load(trained / "ckpt" / "last.pt", weights_only=True)["payload"]),
                       weights_only=True)
    state["rng"]["numpy"] = np.random.get_state()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    old = tmp_path / "old.pt"
    torch.save({"format": FORMAT, "sha256": hashlib.sha256(payload).hexdigest(), "payload": payload}, old)
    assert_one_line_error(run_cli("export", str(old), "--out", str(tmp_path / "x.ply")), str(old), "0.1.0")


def test_checkpoint_with_missing_keys_is_refused(tmp_path, trained):
    buffer = io.BytesIO()
    torch.save({"step": 3, "config": {}}, buffer)
    payload = buffer.getvalue()
    partial = tmp_path / "partial.pt"
    torch.save({"format": FORMAT, "sha256": hashlib.sha256(payload).hexdigest(), "payload": payload}, partial)
    assert_one_line_error(run_cli("eval", str(partial)), str(partial), "sh_degree, gaussians")
    config = write_config(tmp_path, tmp_path / "run")
    assert_one_line_error(run_cli("fit", "--config", str(config), "--resume", str(partial)), str(partial))


# -- 2. nothing is imported from the config's folder unless named ------------------------------
def test_modules_beside_a_config_do_not_shadow_packages(tmp_path):
    folder = tmp_path / "configs"
    marker = tmp_path / "shadowed.txt"
    for name in ("lpips", "numpy", "yaml"):
        folder.mkdir(exist_ok=True)
        (folder / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write('{name}')\n")
    (folder / "my_plugin.py").write_text("VALUE = 1\n")
    config = write_config(folder, tmp_path / "run", extra="imports: [my_plugin]")
    config.write_text(config.read_text().replace("lpips: false", "lpips: true"))
    result = run_cli("fit", "--config", str(config), "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not marker.exists(), marker.read_text()
    assert "lpips package cannot be imported" in (tmp_path / "run" / "log.txt").read_text()


# -- 3. one process per run directory; a fresh fit never mixes with an old run ----------------
def _files(folder: Path) -> dict:
    """Every file under ``folder`` with its bytes (a run directory's full content)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_second_fit_into_a_locked_run_dir_exits_2_and_a_stale_lock_is_taken_over(tmp_path):
    config = write_config(tmp_path, tmp_path / "run", steps=400)
    first = subprocess.Popen([sys.executable, "-m", "splattrain", "fit", "--config", str(config),
                              "default_hooks.logger.interval=5", "default_hooks.checkpoint.interval=5"],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in first.stdout:
            if "step 5/400" in line:
                break
        second = run_cli("fit", "--config", str(config), "--resume")
        assert_one_line_error(second, str(tmp_path / "run"), f"process {first.pid}")
    finally:
        first.kill()  # SIGKILL: its lock file stays behind
        first.wait()
    assert (tmp_path / "run" / ".splattrain.lock").read_text().strip() == str(first.pid)
    resumed = run_cli("fit", "--config", str(config), "--resume", "trainer.max_steps=12", "--quiet")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"left by process {first.pid}" in (tmp_path / "run" / "log.txt").read_text()
    assert not (tmp_path / "run" / ".splattrain.lock").exists()


def test_fresh_fit_into_a_run_with_checkpoints_is_refused_and_overwrite_moves_it_aside(tmp_path, trained):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = _files(run)
    config = write_config(tmp_path, run, steps=3)
    assert_one_line_error(run_cli("fit", "--config", str(config)), str(run / "ckpt"), "--resume", "--overwrite")
    assert _files(run) == before
    result = run_cli("fit", "--config", str(config), "--overwrite", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    (aside,) = tmp_path.glob("run.old-*")
    assert _files(aside) == before
    assert sorted(p.name for p in (run / "ckpt").glob("step_*.pt")) == ["step_000003.pt"]


# -- 4. a refused resume changes nothing in the run directory ---------------------------------
def test_refused_resume_leaves_the_run_directory_untouched(tmp_path, trained):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = _files(run)
    config = write_config(tmp_path, run, steps=4)
    result = run_cli("fit", "--config", str(config), "--resume", "model.sh_degree=2", "writers=[{type: jsonl}]")
    assert_one_line_error(result, "model.sh_degree: 1 -> 2")
    assert _files(run) == before


# -- 6. an interrupted final validation or after_train is not swallowed, and resume finishes it --
INTERRUPTER = '''
import os, signal
from splattrain import HOOKS, Hook

@HOOKS.register()
class InterruptAt(Hook):
    def __init__(self, point: str = "before_val"):
        super().__init__()
        self.point = point

    def before_val(self, trainer):
        if self.point == "before_val" and trainer.step == trainer.max_steps:
            os.kill(os.getpid(), signal.SIGINT)

    def after_train(self, trainer):
        if self.point == "after_train":
            os.kill(os.getpid(), signal.SIGINT)
'''


@pytest.mark.parametrize("point", ["before_val", "after_train"])
def test_interrupt_after_the_last_step_stops_and_resume_validates(tmp_path, point):
    import json

    (tmp_path / "interrupter.py").write_text(INTERRUPTER)
    extra = f"imports: [interrupter]\ncustom_hooks:\n  - type: InterruptAt\n    point: {point}\n"
    config = write_config(tmp_path, tmp_path / "run", steps=3, extra=extra)
    stopped = run_cli("fit", "--config", str(config), "--quiet")
    assert stopped.returncode == 130, stopped.stdout + stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert not (tmp_path / "run" / "results.json").exists()
    resumed = run_cli("fit", "--config", str(config), "--resume", "custom_hooks=[]", "--quiet")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["steps"] == 3 and results["psnr"] is not None and results["psnr"] > 5


# -- 7. temporaries of a killed process are removed; files follow the umask ------------------
def test_stale_temporaries_are_removed_and_files_follow_the_umask(tmp_path, trained):
    import os
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    stale = [run / "ckpt" / ".step_000002.pt.k3j2h1.tmp", run / ".config.yaml.a8d7f6.tmp"]
    for path in stale:
        path.write_bytes(b"half written")
    config = write_config(tmp_path, run, steps=3)
    result = run_cli("fit", "--config", str(config), "--resume", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not any(path.exists() for path in stale)
    assert "left by a process that stopped while writing it" in (run / "log.txt").read_text()
    mask = os.umask(0)
    os.umask(mask)
    for name in ("config.yaml", "results.json", "ckpt/step_000003.pt"):
        assert (run / name).stat().st_mode & 0o777 == 0o666 & ~mask, name


# -- 11. output paths that cannot be written: one line naming the path -------------------------
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


# -- 12. config values refused before training, naming the key / file / hook ------------------
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


# -- 13. render options out of range ----------------------------------------------------------
@pytest.mark.parametrize("option, value", [("--frames", "0"), ("--frames", "-5"), ("--fps", "0"), ("--fps", "-10")])
def test_render_frames_and_fps_out_of_range(tmp_path, trained, option, value):
    result = run_cli("render", str(trained), "--path", "orbit", option, value, "--out", str(tmp_path / "r"))
    assert_one_line_error(result, option, value)
    assert not (tmp_path / "r").exists()


# -- 14. Ctrl-C while the command line starts -------------------------------------------------
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
        assert err.strip() == "stopped by SIGINT", err


# -- 15. data: images of every PNG mode, a PLY with NaN ---------------------------------------
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


# -- 16. no message suggests unsafe loading --------------------------------------------------
def test_checkpoint_errors_never_suggest_unsafe_loading(tmp_path, trained):
    import numpy as np

    raw = (trained / "ckpt" / "last.pt").read_bytes()
    (tmp_path / "short.pt").write_bytes(raw[: len(raw) // 3])
    torch.save({"format": FORMAT, "payload": np.zeros(3)}, tmp_path / "numpy.pt")
    for name, fragment in [("short.pt", "truncated or corrupted"), ("numpy.pt", "does not load")]:
        for command in ("eval", "export"):
            line = assert_one_line_error(run_cli(command, str(tmp_path / name)), str(tmp_path / name), fragment)
            assert "weights_only" not in line


# -- 8. resume refuses a strategy change; a checkpoint of averaged weights resumes its training weights --
def test_resume_refuses_a_strategy_change(tmp_path, trained):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = _files(run)
    config = write_config(tmp_path, run, steps=4)
    result = run_cli("fit", "--config", str(config), "--resume", "strategy={type: mcmc, max_gaussians: 500}")
    assert_one_line_error(result, "strategy.type: 'default' -> 'mcmc'")
    assert _files(run) == before


def test_resume_without_the_ema_hook_trains_from_the_training_weights(tmp_path):
    from resume_check import make_trainer
    from splattrain.checkpoint import load_checkpoint_file

    ema = "custom_hooks:\n  - {type: EMAHook, momentum: 0.5}\n"
    with_ema = make_trainer(tmp_path, "ema", steps=6, extra=ema)
    with_ema.train()
    saved = load_checkpoint_file(tmp_path / "ema" / "ckpt" / "step_000006.pt")
    training = saved["hooks"]["EMAHook"]["training"]
    assert not torch.equal(saved["gaussians"]["means"], training["means"])  # the file holds the averages
    without = make_trainer(tmp_path, "plain", steps=8)
    without.load_checkpoint(tmp_path / "ema" / "ckpt" / "step_000006.pt")
    for name, weights in training.items():
        assert torch.equal(without.model.params[name].detach(), weights), name


# -- 9. save_best: loss is refused (validation measures no loss) ------------------------------
def test_save_best_loss_is_refused(tmp_path):
    config = write_config(tmp_path, tmp_path / "run", extra="default_hooks:\n  checkpoint: {save_best: loss}\n")
    assert_one_line_error(run_cli("fit", "--config", str(config)), "save_best 'loss'", "psnr")
    assert not (tmp_path / "run").exists()
