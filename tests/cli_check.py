"""Running the command line as a user would, and checking its one-line errors (test helpers)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import cli_runner
from conftest import DEMO, REPO


def run_cli(*args: str, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m splattrain *args`` in a process of its own (forked from one that imported it)."""
    return cli_runner.run(args, cwd, timeout)


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


def files_of(folder: Path) -> dict:
    """Every file under ``folder`` with its bytes (a run directory's full content)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
