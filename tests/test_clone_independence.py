"""The suite holds in any clone: every test that reads the scenes kept beside a checkout
(``../shared``) reaches them through ``conftest.SHARED`` and skips, saying why, without them."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Set

import pytest

from conftest import REPO

TESTS = REPO / "tests"


def _names(node: ast.AST) -> Set[str]:
    """The names ``node`` reads, its parameters (fixtures) included."""
    return {n.id if isinstance(n, ast.Name) else n.arg for n in ast.walk(node) if isinstance(n, (ast.Name, ast.arg))}


def _tests_reading_shared() -> List[str]:
    """The test ids that reach the shared scenes: through a module-level name made from
    ``SHARED`` (or imported from a module that makes one), directly or through a helper."""
    ids = []
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        tainted = {"SHARED", "CUP", "LEGO"} & _names(tree)
        for node in tree.body:  # what comes from a module that hands out a shared path
            imported = {a.asname or a.name for a in node.names} if isinstance(node, ast.ImportFrom) else set()
            if imported & {"SHARED", "CUP", "LEGO"}:
                tainted |= imported - {"REPO", "DEMO"}
        if path.name == Path(__file__).name or not tainted:
            continue
        functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        for function in functions:  # helpers that read the tainted names taint their own names
            if not function.name.startswith("test_") and _names(function) & tainted:
                tainted.add(function.name)
        for function in functions:
            if function.name.startswith("test_") and _names(function) & tainted:
                ids.append(f"{path}::{function.name}")
    return ids


def test_the_shared_folder_is_named_only_by_conftest():
    """No test spells the folder's path itself (it would escape the skip and ``$SPLATTRAIN_SHARED``)."""
    offenders = []
    for path in sorted(TESTS.glob("*.py")):
        if path.name in ("conftest.py", Path(__file__).name):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    node.value == "shared" or "../shared" in node.value and "absent" not in node.value):
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, offenders


@pytest.mark.slow  # runs the modules that read the shared scenes, without them
def test_tests_that_read_the_shared_scenes_skip_without_them(tmp_path):
    tests = _tests_reading_shared()
    assert tests, "some tests read the shared scenes"
    env = {**os.environ, "SPLATTRAIN_SHARED": str(tmp_path / "absent")}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-x",
                             *tests], cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    tail = result.stdout[-3000:]
    assert result.returncode == 0, tail
    assert "skipped" in tail and "is absent" in tail, tail
