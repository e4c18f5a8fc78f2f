"""The test helper that forks command-line runs gives what a fresh ``python -m splattrain`` gives."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import cli_runner
from conftest import tiny_config_text


def fresh(args, cwd, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "splattrain", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.parametrize("args", [["list", "losses"], ["fit", "--config", "missing.yaml"], ["fitt"],
                                  ["fit", "--config", "cfg.yaml", "--dry-run", "trainer.max_step=3"]])
def test_a_forked_run_gives_the_exit_code_and_output_of_a_fresh_one(tmp_path, args):
    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path))
    forked, started = cli_runner.run(args, tmp_path), fresh(args, tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (started.returncode, started.stdout, started.stderr)


def test_the_child_runs_in_the_callers_folder_with_the_callers_environment(tmp_path):
    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=2))
    env = {**os.environ, "SPLATTRAIN_ISA": "no-such-set"}  # read by the compiled kernels when a run starts
    named = cli_runner.run(["fit", "--config", "cfg.yaml", "--quiet"], tmp_path, env=env)
    assert "no-such-set" in named.stdout + named.stderr
    plain = cli_runner.run(["fit", "--config", "cfg.yaml", "--quiet", "--overwrite"], tmp_path)
    assert plain.returncode == 0 and "no-such-set" not in plain.stdout + plain.stderr, plain.stderr
    assert (tmp_path / "run" / "results.json").is_file()


def test_a_run_past_its_time_is_ended(tmp_path):
    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=100000))
    with pytest.raises(subprocess.TimeoutExpired):
        cli_runner.run(["fit", "--config", "cfg.yaml", "--quiet"], tmp_path, timeout=3)
