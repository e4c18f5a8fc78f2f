"""Plugins check their options against the run they are built into (``Hook.check``) as soon as
the trainer is built: ``fit --dry-run`` fails there, in one line naming the plugin, exit 2, and
nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_check import assert_one_line_error, run_cli, write_config
from splattrain.errors import ConfigError
from splattrain.hooks import Hook
from resume_check import make_trainer, single_thread  # noqa: F401

CHECKED = '''
from splattrain import HOOKS, Hook
from splattrain.errors import ConfigError


@HOOKS.register(force=True)
class NeedsLongRun(Hook):
    """Acts at step ``at``, which must lie within the run."""

    def __init__(self, at: int = 100) -> None:
        super().__init__()
        self.at = at

    def check(self, trainer) -> None:
        if self.at > trainer.max_steps:
            raise ConfigError(f"at {self.at} is past the run's {trainer.max_steps} steps")
'''


def _config(tmp_path: Path, extra: str) -> Path:
    module = tmp_path / "checked.py"
    module.write_text(CHECKED)
    return write_config(tmp_path, tmp_path / "run", steps=5, extra=f"imports: [{module}]\n{extra}")


def test_dry_run_runs_the_hooks_checks(tmp_path):
    config = _config(tmp_path, "custom_hooks:\n  - {type: NeedsLongRun, at: 50}\n")
    for args in (["--dry-run"], []):
        result = run_cli("fit", "--config", str(config), *args)
        assert_one_line_error(result, str(config), "hook NeedsLongRun", "at 50 is past the run's 5 steps")
    assert not (tmp_path / "run").exists()
    fine = _config(tmp_path, "custom_hooks:\n  - {type: NeedsLongRun, at: 5}\n")
    assert run_cli("fit", "--config", str(fine), "--dry-run").returncode == 0


def test_contribution_pruning_needs_a_strategy_that_says_when_densification_ends(tmp_path):
    strategy = tmp_path / "endless.py"
    strategy.write_text('''
from splattrain import STRATEGIES
from splattrain.strategy import Strategy


@STRATEGIES.register(force=True)
class Endless(Strategy):
    """Never refines, and has no end to its refinement."""
''')
    config = write_config(tmp_path, tmp_path / "run", steps=5, extra=(
        f"imports: [{strategy}]\nstrategy: {{type: Endless}}\ncustom_hooks:\n  - {{type: ContributionPruneHook}}\n"))
    result = run_cli("fit", "--config", str(config), "--dry-run")
    assert_one_line_error(result, "hook ContributionPruneHook", "does not say when densification ends")


class _Refuses(Hook):
    def check(self, trainer) -> None:
        raise ConfigError("not with this run")


def test_a_hook_registered_in_code_is_checked_before_training(tmp_path):
    trainer = make_trainer(tmp_path, "run", steps=3)
    trainer.register_hook(_Refuses())
    with pytest.raises(ConfigError, match="hook _Refuses: not with this run"):
        trainer.train()
    assert trainer.step == 0 and not (tmp_path / "run" / "ckpt").exists()
