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
