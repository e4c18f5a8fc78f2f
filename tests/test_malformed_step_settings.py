"""Malformed step settings (the coarse-to-fine schedule, ContributionPruneHook's steps) are refused
in one line naming the key, exit code 2, whether or not the run's step settings are scaled and
whether they are written in the config file or given on the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_check import assert_one_line_error, run_cli
from conftest import DEMO, REPO
from splattrain.cli import main

DEMO_CONFIG = REPO / "configs" / "demo.yaml"

#: (key under trainer.resolution, malformed value)
RESOLUTION = [
    ("schedule", "[[abc,2]]"),
    ("schedule", "[[0]]"),
    ("schedule", "[5]"),
    ("schedule", "[[0,2,3]]"),
    ("schedule", "[[0,.inf]]"),
    ("schedule", "[[true,2]]"),
    ("max_factor", ".inf"),
    ("until", "-5"),
]
#: malformed values of ContributionPruneHook's steps
PRUNE_STEPS = ["[abc]", "5", "[[1]]", "[null]", '"abc"']
#: the shipped demo is written for 2000 steps: a run of 50 scales every step setting
SCALING = {"scaled": ["trainer.max_steps=50"], "unscaled": []}


def demo_copy(tmp_path: Path, resolution: str = "", hooks: str = "") -> Path:
    """configs/demo.yaml with ``resolution`` lines under ``trainer.resolution`` (replacing its
    ``schedule: auto`` when they set a schedule) and ``hooks`` appended."""
    text = DEMO_CONFIG.read_text().replace("path: data/demo", f"path: {DEMO}")
    assert "    schedule: auto\n" in text
    if resolution:
        kept = "" if resolution.startswith("schedule") else "    schedule: auto\n"
        text = text.replace("    schedule: auto\n", f"{kept}    {resolution}\n")
    text += f"\noutput_dir: {tmp_path / 'run'}\nwriters: []\n{hooks}"
    config = tmp_path / "cfg.yaml"
    config.write_text(text)
    return config


def refused(capsys, config: Path, overrides, *fragments: str) -> str:
    """``splattrain fit --config config --dry-run overrides`` exits 2 with one line holding every fragment."""
    code = main(["fit", "--config", str(config), "--dry-run", *overrides])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


@pytest.mark.parametrize("scaling", SCALING)
@pytest.mark.parametrize("key, value", RESOLUTION)
def test_a_malformed_resolution_setting_in_the_file_is_one_line(tmp_path, capsys, key, value, scaling):
    config = demo_copy(tmp_path, resolution=f"{key}: {value}")
    refused(capsys, config, SCALING[scaling], f"key 'trainer.resolution.{key}'")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("scaling", SCALING)
@pytest.mark.parametrize("key, value", RESOLUTION)
def test_a_malformed_resolution_setting_on_the_command_line_is_one_line(tmp_path, capsys, key, value, scaling):
    config = demo_copy(tmp_path)
    refused(capsys, config, [*SCALING[scaling], f"trainer.resolution.{key}={value}"], f"key 'trainer.resolution.{key}'")


@pytest.mark.parametrize("scaling", SCALING)
@pytest.mark.parametrize("value", PRUNE_STEPS)
def test_malformed_prune_steps_in_the_file_are_one_line(tmp_path, capsys, value, scaling):
    config = demo_copy(tmp_path, hooks=f"custom_hooks:\n  - {{type: ContributionPruneHook, steps: {value}}}\n")
    refused(capsys, config, SCALING[scaling], "custom_hooks[0]", "must be a list of steps >= 1 or null")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("scaling", SCALING)
@pytest.mark.parametrize("value", PRUNE_STEPS)
def test_malformed_prune_steps_on_the_command_line_are_one_line(tmp_path, capsys, value, scaling):
    config = demo_copy(tmp_path)
    hooks = f"custom_hooks=[{{type: ContributionPruneHook, steps: {value}}}]"
    refused(capsys, config, [*SCALING[scaling], hooks], "custom_hooks[0]", "must be a list of steps >= 1 or null")


def test_the_shipped_demo_refuses_them_from_a_real_command_line(tmp_path):
    """``splattrain fit --config configs/demo.yaml trainer.max_steps=50 ...`` as a user types it."""
    for override, key in (("trainer.resolution.schedule=[[abc,2]]", "trainer.resolution.schedule"),
                          ("trainer.resolution.max_factor=.inf", "trainer.resolution.max_factor"),
                          ("custom_hooks=[{type: ContributionPruneHook, steps: [null]}]", "custom_hooks[0].steps")):
        assert_one_line_error(run_cli("fit", "--config", "configs/demo.yaml", "--dry-run", "trainer.max_steps=50",
                                      f"output_dir={tmp_path / 'run'}", override), f"'{key}'")
    assert not (tmp_path / "run").exists()


def test_well_formed_step_settings_still_scale(tmp_path, capsys):
    """The checks refuse only what is malformed: a valid schedule and prune steps follow the run."""
    config = demo_copy(tmp_path, resolution="schedule: [[0, 4], [1000, 2], [1500, 1]]",
                       hooks="custom_hooks:\n  - {type: ContributionPruneHook, steps: [1500]}\n")
    assert main(["fit", "--config", str(config), "--dry-run", "trainer.max_steps=50"]) == 0
    out = capsys.readouterr().out
    assert "trainer.resolution.schedule [[0, 4], [25, 2], [38, 1]]" in out
    assert "custom_hooks[0].steps [38]" in out
