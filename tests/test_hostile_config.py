"""Configs a user is sent: alias bombs, interpolation loops, impossible values and runs that
cannot fit in memory are refused in one line (exit code 2) naming the key, without hanging."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_check import assert_one_line_error, config_text, run_cli, write_config
from conftest import REPO


def _alias_bomb(levels: int = 9) -> str:
    """A few hundred bytes of YAML whose aliases expand to 9^levels values."""
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    previous = "a"
    for index in range(levels):
        name = f"l{index}"
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
        previous = name
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_from_its_size(tmp_path):
    config = tmp_path / "bomb.yaml"
    config.write_text(config_text(tmp_path / "run") + "custom:\n" + "".join(
        "  " + line + "\n" for line in _alias_bomb().splitlines()))
    assert config.stat().st_size < 2000
    assert_one_line_error(run_cli("fit", "--config", str(config), "--dry-run", timeout=120), str(config),
                          "with its YAML aliases expanded, config holds more than")


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path):
    config = tmp_path / "loop.yaml"
    config.write_text(config_text(tmp_path / "run") + "custom: &loop [1, *loop]\n")
    assert_one_line_error(run_cli("fit", "--config", str(config), "--dry-run", timeout=120), str(config),
                          "config.custom contains itself (as config.custom[1])")


def test_a_stop_signal_is_honoured_while_a_large_config_parses(tmp_path):
    """A 6 MB config (a long list) parses for many seconds: SIGTERM stops it with exit code 143
    instead of waiting for the parse to end."""
    config = tmp_path / "large.yaml"
    config.write_text(config_text(tmp_path / "run") + "imports:\n" + "  - module_x\n" * 600_000)
    child = subprocess.Popen([sys.executable, "-m", "splattrain", "fit", "--config", str(config), "--dry-run"],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.poll() is None:  # until the command line records SIGTERM
        status = Path(f"/proc/{child.pid}/status").read_text()
        caught = int(status.split("SigCgt:")[1].split()[0], 16)
        if caught & (1 << (signal.SIGTERM - 1)):
            break
        time.sleep(0.05)
    child.send_signal(signal.SIGTERM)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 143, stderr
    # the parse acts on it; on a loaded machine the imports before it may outlast the 5 s a signal
    # waits for a safe point, and the watchdog ends the process instead (the same exit code)
    assert stderr.strip().splitlines()[-1] in ("stopped by SIGTERM",
                                               "stopped by SIGTERM: no safe point came within 5 s; ended at once")


def test_interpolation_loop_is_refused(tmp_path):
    config = tmp_path / "loop.yaml"
    config.write_text(config_text(tmp_path / "run").replace("name: tiny", "name: ${data.test_split}")
                      .replace("  downscale: 8", "  downscale: 8\n  test_split: ${name}"))
    assert_one_line_error(run_cli("fit", "--config", str(config), "--dry-run"), str(config), "key 'name'",
                          "Recursive interpolation")


def test_unset_environment_variable_is_refused(tmp_path):
    config = write_config(tmp_path, tmp_path / "run")
    env_name = "SPLATTRAIN_TEST_UNSET_VARIABLE"
    assert env_name not in os.environ
    assert_one_line_error(run_cli("fit", "--config", str(config), "--dry-run", f"name=${{oc.env:{env_name}}}"),
                          "key 'name'", env_name)


@pytest.mark.parametrize("override, key", [
    ("model.init.opacity=1.5", "model.init.opacity"),
    ("model.init.opacity=0", "model.init.opacity"),
    ("model.init.extent=nan", "model.init.extent"),
    ("seed=100000000000000000000000000000", "seed"),
    ("strategy.refine_every=0", "strategy.refine_every"),
    ("strategy.reset_every=0", "strategy.reset_every"),
    ("trainer.steps_scaler=nan", "trainer.steps_scaler"),
    ("data.background=[nan,0,0]", "data.background"),
    ("trainer.max_steps=100000000000000000000000000000", "trainer.max_steps"),
    ("trainer.steps_scaler=1e20", "trainer.max_steps"),
])
def test_impossible_values_are_refused(tmp_path, override, key):
    config = write_config(tmp_path, tmp_path / "run")
    assert_one_line_error(run_cli("fit", "--config", str(config), "--dry-run", override), f"'{key}'")


def test_schedule_of_a_huge_run_is_refused_not_computed(tmp_path):
    config = write_config(tmp_path, tmp_path / "run", steps=10**29)
    assert_one_line_error(run_cli("schedule", "--config", str(config), timeout=120), "trainer.max_steps", "at most")


def test_schedule_of_a_long_run_samples_its_curves(tmp_path):
    config = write_config(tmp_path, tmp_path / "run", steps=10_000_000)
    plot = tmp_path / "schedule.png"
    result = run_cli("schedule", "--config", str(config), "--out", str(plot), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "10000000" in result.stdout and plot.stat().st_size > 0


@pytest.mark.parametrize("override, fragment", [
    ("model.init.num_points=3000000000", "model.init.num_points=3000000000 needs about"),
    ("data.downscale=0.01", "data.downscale=0.01"),
])
def test_what_cannot_fit_in_memory_is_refused_with_the_estimate(tmp_path, override, fragment):
    config = write_config(tmp_path, tmp_path / "run")
    line = assert_one_line_error(run_cli("fit", "--config", str(config), "--dry-run", "model.init.type=random", override,
                                         timeout=120), fragment, "of memory")
    assert "GiB" in line


def _capped_dry_run(config: Path, *overrides: str) -> subprocess.CompletedProcess:
    """``fit --dry-run`` (which decodes every image) with 1.2 GB of address space: about 550 MB
    left once torch is loaded."""
    def cap() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (1200 << 20, 1200 << 20))

    return subprocess.run([sys.executable, "-m", "splattrain", "fit", "--config", str(config), "--dry-run", *overrides],
                          cwd=REPO, capture_output=True, text=True, timeout=300, preexec_fn=cap,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_an_image_budget_lets_a_scene_larger_than_memory_load_and_still_refuses_what_cannot_fit(tmp_path):
    """The demo at 1829x1829: its 58 decoded images need about 800 MB, too many to keep; with
    data.image_budget_mb the check counts what is kept (one image) and each decoding thread's work."""
    config = write_config(tmp_path, tmp_path / "run")
    line = assert_one_line_error(_capped_dry_run(config, "data.num_workers=2", "data.downscale=0.07"),
                                 "data.downscale=0.07", "58 images", "of memory", "data.image_budget_mb keeps fewer")
    assert "all kept in memory" in line
    result = _capped_dry_run(config, "data.num_workers=2", "data.downscale=0.07", "data.image_budget_mb=20")
    assert result.returncode == 0, result.stdout + result.stderr
    assert_one_line_error(_capped_dry_run(config, "data.num_workers=2", "data.downscale=0.02", "data.image_budget_mb=20"),
                          "data.downscale=0.02", "kept in memory by data.image_budget_mb=20", "of memory")
