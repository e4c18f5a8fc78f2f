"""Runs that must not be mixed or lost: the run directory lock, fresh fits into old runs, refused
resumes that change nothing, interrupts after the last step, stale temporaries."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cli_check import assert_one_line_error, files_of, run_cli, trained, write_config  # noqa: F401
from conftest import REPO


def test_second_fit_into_a_locked_run_dir_exits_2_and_a_stale_lock_is_taken_over(tmp_path):
    config = write_config(tmp_path, tmp_path / "run", steps=400)
    first = subprocess.Popen([sys.executable, "-m", "splattrain", "fit", "--config", str(config),
                              "default_hooks.logger.interval=5", "default_hooks.checkpoint.interval=5"],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in first.stdout:
            if "step 5/400" in line:
                break
        second = run_cli("fit", "--config", str(config), "--resume")
        assert_one_line_error(second, str(tmp_path / "run"), f"process {first.pid}")
    finally:
        first.kill()  # SIGKILL: its lock file stays behind
        first.wait()
    assert (tmp_path / "run" / ".splattrain.lock").read_text().strip() == str(first.pid)
    resumed = run_cli("fit", "--config", str(config), "--resume", "trainer.max_steps=12", "--quiet")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"left by process {first.pid}" in (tmp_path / "run" / "log.txt").read_text()
    assert not (tmp_path / "run" / ".splattrain.lock").exists()


def test_fresh_fit_into_a_run_with_checkpoints_is_refused_and_overwrite_moves_it_aside(tmp_path, trained):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = files_of(run)
    config = write_config(tmp_path, run, steps=3)
    assert_one_line_error(run_cli("fit", "--config", str(config)), str(run / "ckpt"), "--resume", "--overwrite")
    assert files_of(run) == before
    result = run_cli("fit", "--config", str(config), "--overwrite", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    (aside,) = tmp_path.glob("run.old-*")
    assert files_of(aside) == before
    assert sorted(p.name for p in (run / "ckpt").glob("step_*.pt")) == ["step_000003.pt"]


# -- a refused resume changes nothing in the run directory ---------------------------------
def test_refused_resume_leaves_the_run_directory_untouched(tmp_path, trained):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = files_of(run)
    config = write_config(tmp_path, run, steps=4)
    result = run_cli("fit", "--config", str(config), "--resume", "model.sh_degree=2", "writers=[{type: jsonl}]")
    assert_one_line_error(result, "model.sh_degree: 1 -> 2")
    assert files_of(run) == before


# -- an interrupted final validation or after_train is not swallowed, and resume finishes it --
INTERRUPTER = '''
import os, signal
from splattrain import HOOKS, Hook

@HOOKS.register()
class InterruptAt(Hook):
    def __init__(self, point: str = "before_val"):
        super().__init__()
        self.point = point

    def before_val(self, trainer):
        if self.point == "before_val" and trainer.step == trainer.max_steps:
            os.kill(os.getpid(), signal.SIGINT)

    def after_train(self, trainer):
        if self.point == "after_train":
            os.kill(os.getpid(), signal.SIGINT)
'''


@pytest.mark.parametrize("point", ["before_val", "after_train"])
def test_interrupt_after_the_last_step_stops_and_resume_validates(tmp_path, point):
    import json

    (tmp_path / "interrupter.py").write_text(INTERRUPTER)
    extra = f"imports: [interrupter]\ncustom_hooks:\n  - type: InterruptAt\n    point: {point}\n"
    config = write_config(tmp_path, tmp_path / "run", steps=3, extra=extra)
    stopped = run_cli("fit", "--config", str(config), "--quiet")
    assert stopped.returncode == 130, stopped.stdout + stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert not (tmp_path / "run" / "results.json").exists()
    resumed = run_cli("fit", "--config", str(config), "--resume", "custom_hooks=[]", "--quiet")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["steps"] == 3 and results["psnr"] is not None and results["psnr"] > 5


# -- temporaries of a killed process are removed; files follow the umask ------------------
def test_stale_temporaries_are_removed_and_files_follow_the_umask(tmp_path, trained):
    import os
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    stale = [run / "ckpt" / ".step_000002.pt.k3j2h1.tmp", run / ".config.yaml.a8d7f6.tmp"]
    for path in stale:
        path.write_bytes(b"half written")
    config = write_config(tmp_path, run, steps=3)
    result = run_cli("fit", "--config", str(config), "--resume", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not any(path.exists() for path in stale)
    assert "left by a process that stopped while writing it" in (run / "log.txt").read_text()
    mask = os.umask(0)
    os.umask(mask)
    for name in ("config.yaml", "results.json", "ckpt/step_000003.pt"):
        assert (run / name).stat().st_mode & 0o777 == 0o666 & ~mask, name


def test_a_run_folder_config_with_imports_is_reused_from_another_directory(tmp_path):
    """config.yaml names its imports by absolute path: a new fit from it, and eval --trust-config,
    work from a directory that is neither the repository nor the config's."""
    run = tmp_path / "loss_run"
    quick = ["trainer.max_steps=4", "trainer.val_interval=0", "data.downscale=8", "model.init.num_points=300",
             "metrics.lpips=false", "writers=[]", "model.sh_degree=0"]
    first = run_cli("fit", "--config", "configs/demo_loss.yaml", *quick, f"output_dir={run}", "--quiet")
    assert first.returncode == 0, first.stderr
    saved = (run / "config.yaml").read_text()
    assert f"- {REPO / 'examples' / 'my_loss.py'}" in saved
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = run_cli("fit", "--config", str(run / "config.yaml"), f"output_dir={tmp_path / 'again'}", "--quiet",
                    f"data.path={REPO / 'data' / 'demo'}", cwd=elsewhere)
    assert again.returncode == 0, again.stderr
    assert "depth_smoothness" in (tmp_path / "again" / "config.yaml").read_text()
    scored = run_cli("eval", str(run), "--trust-config", "--out", str(tmp_path / "eval"), cwd=elsewhere)
    assert scored.returncode == 0, scored.stderr
