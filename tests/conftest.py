"""Shared fixtures: the shipped demo scene and small configs over it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo"
#: The scenes kept beside a checkout (``../shared``; ``$SPLATTRAIN_SHARED`` names another folder).
#: A test that reads one skips with :func:`needs_shared` where the clone has none.
SHARED = Path(os.environ.get("SPLATTRAIN_SHARED") or REPO.parent / "shared")


def needs_shared(path: Path) -> pytest.MarkDecorator:
    """Skip, naming ``path``, when that part of the shared folder is absent."""
    return pytest.mark.skipif(not path.exists(), reason=f"{path.relative_to(SHARED.parent)} is absent from this clone's surroundings")


def pytest_configure(config: pytest.Config) -> None:
    """With test workers (pytest-xdist), compile the CPU rasterizer once, before they start,
    rather than in every worker at once."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        from splattrain.kernels.build import load_library

        load_library()


@pytest.fixture(scope="session")
def library():
    """The compiled CPU library from the cache (built once, before the test workers started)."""
    from splattrain.kernels import build

    try:
        build.find_compiler()
    except build.BuildError as error:
        pytest.skip(f"no C++ compiler: {error}")
    return build.load_library()


@pytest.fixture
def write_config(tmp_path: Path):
    """Write a YAML config into tmp_path and return its path."""

    def write(text: str, name: str = "cfg.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def tiny_config_text(tmp_path: Path, steps: int = 30, extra: str = "") -> str:
    """A config that trains the demo scene at 1/4 resolution for a few steps."""
    return f"""
name: tiny
output_dir: {tmp_path / 'run'}
data:
  path: {DEMO}
  downscale: 4
trainer:
  max_steps: {steps}
  val_interval: 0
model:
  sh_degree: 1
  init:
    num_points: 300
metrics:
  lpips: false
{extra}
"""
