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
