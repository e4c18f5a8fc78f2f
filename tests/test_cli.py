"""The command line: exit codes and one-line errors for user mistakes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cli_runner
from conftest import REPO, tiny_config_text


def run_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return cli_runner.run(args, cwd)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_unknown_key_exit_2_names_key_file_and_suggestion(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(tiny_config_text(tmp_path) + "trainer:\n  val_intervall: 3\n".replace("trainer:\n", "renderer:\n"))
    result = run_cli("fit", "--config", str(cfg))
    assert_one_line_error(result, str(cfg), "renderer.val_intervall")


def test_override_typo_suggests_close_key(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path))
    result = run_cli("fit", "--config", str(cfg), "trainer.max_step=5")
    assert_one_line_error(result, "trainer.max_step", "max_steps")


def test_missing_config_file(tmp_path):
    assert_one_line_error(run_cli("fit", "--config", str(tmp_path / "none.yaml")), "none.yaml", "not found")


def test_missing_data_folder(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path))
    result = run_cli("fit", "--config", str(cfg), f"data.path={tmp_path / 'nowhere'}")
    assert_one_line_error(result, "nowhere")


def test_unknown_hook_type_names_close_match(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, extra="custom_hooks:\n  - type: LogHok\n"))
    assert_one_line_error(run_cli("fit", "--config", str(cfg)), "LogHok", "LogHook")


def test_user_module_registers_hook_via_imports_and_dry_run_writes_nothing(tmp_path):
    (tmp_path / "my_hooks.py").write_text(
        "from splattrain import HOOKS, Hook\n\n"
        "@HOOKS.register()\n"
        "class ShoutHook(Hook):\n"
        "    '''Says hello.'''\n"
        "    priority = 'HIGH'\n"
        "    def before_train(self, trainer):\n"
        "        trainer.console.info('hello')\n"
    )
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, extra="imports: [my_hooks]\ncustom_hooks:\n  - type: ShoutHook\n"))
    result = run_cli("fit", "--config", str(cfg), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "ShoutHook (HIGH)" in result.stdout and "before_train" in result.stdout
    assert "max_steps: 30" in result.stdout
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("what, name", [("hooks", "CheckPointHook"), ("writers", "tensorboard"),
                                        ("renderers", "torch"), ("datasets", "blender"),
                                        ("losses", "dssim"), ("strategies", "mcmc"), ("trainers", "DefaultTrainer")])
def test_list(what, name):
    result = run_cli("list", what)
    assert result.returncode == 0 and name in result.stdout


@pytest.mark.parametrize("command", ["eval", "render", "export"])
def test_commands_on_missing_target_exit_2(tmp_path, command):
    result = run_cli(command, str(tmp_path / "missing_run"))
    assert_one_line_error(result, "missing_run")


def test_resume_from_corrupted_checkpoint_names_it(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path))
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint at all")
    assert_one_line_error(run_cli("fit", "--config", str(cfg), "--resume", str(bad)), "bad.pt", "corrupted")


def test_resume_then_override_trains_longer(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, steps=4))
    assert run_cli("fit", "--config", str(cfg), "--quiet").returncode == 0
    result = run_cli("fit", "--config", str(cfg), "--quiet", "--resume", "trainer.max_steps=6")
    assert result.returncode == 0, result.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["steps"] == 6


def test_overrides_may_follow_options_and_usage_errors_are_one_line(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path))
    result = run_cli("fit", "--config", str(cfg), "--dry-run", "trainer.max_steps=7", "--verbose",
                     f"output_dir={tmp_path / 'elsewhere'}")
    assert result.returncode == 0, result.stderr
    assert "max_steps: 7" in result.stdout and str(tmp_path / "elsewhere") in result.stdout
    assert_one_line_error(run_cli("fit", "--config", str(cfg), "--bogus"), "--bogus")
    assert_one_line_error(run_cli("fit", "--config", str(cfg), "--dry-run", "notakey"), "notakey")
    assert_one_line_error(run_cli("fitt"), "fitt")


SPINCOUNT_PROBE = (
    "import os, sys\n"
    "sys.argv = ['splattrain', 'list', 'hooks']\n"
    "from splattrain.cli import main\n"
    "main()\n"
    "import torch\n"  # loaded after the command line set it, as in a real run
    "print('GOMP_SPINCOUNT=' + os.environ.get('GOMP_SPINCOUNT', 'unset'))\n"
)


@pytest.mark.parametrize("given, expected", [(None, "10000"), ("250", "250")])
def test_the_command_line_shortens_openmp_spinning_unless_the_environment_says(given, expected):
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    if given is not None:
        env["GOMP_SPINCOUNT"] = given
    done = subprocess.run([sys.executable, "-c", SPINCOUNT_PROBE], capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"GOMP_SPINCOUNT={expected}"
