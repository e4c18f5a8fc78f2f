"""The package's layering (pyproject.toml's import-linter contracts) holds: no module imports
from a layer above its own, and no two sibling modules or packages import each other."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports(root: Path = ROOT) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    return subprocess.run([exe, "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300)


def test_import_contracts_are_kept():
    result = _lint_imports()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    """The check is real: a component importing the engine is reported."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(ROOT / "splattrain", tmp_path / "splattrain", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (tmp_path / "splattrain" / "losses" / "layer_probe.py").write_text("from ..engine import trainer  # noqa: F401\n")
    result = _lint_imports(tmp_path)
    assert result.returncode != 0
    assert "splattrain.losses is not allowed to import splattrain.engine" in result.stdout
