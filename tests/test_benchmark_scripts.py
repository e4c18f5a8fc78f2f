"""Every script under benchmarks/ starts: its imports resolve and ``--help`` prints its usage
without training anything (the benchmarks run for minutes and are not part of the suite). A
module the scripts share (no ``__main__`` block) loads and does nothing."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parent.parent / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", BENCHMARKS, ids=[path.stem for path in BENCHMARKS])
def test_a_benchmark_prints_its_usage(script: Path, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    monkeypatch.syspath_prepend(str(script.parent))
    if 'if __name__ == "__main__":' in script.read_text():
        with pytest.raises(SystemExit) as exit_:
            runpy.run_path(str(script), run_name="__main__")
        assert exit_.value.code in (0, None)
        assert capsys.readouterr().out.startswith("usage:")
    else:
        runpy.run_path(str(script), run_name=script.stem)
        assert capsys.readouterr().out == ""
    assert not list(tmp_path.iterdir())  # nothing written
