"""Run safety: checkpoints on real signals, rescue checkpoints, per-hook timing, timers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, tiny_config_text
from splattrain.checkpoints.files import load_checkpoint_file
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from splattrain.hooks import Hook
from splattrain.registry import HOOKS


def start_fit(cfg: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "splattrain", "fit", "--config", str(cfg), "default_hooks.logger.interval=10", *extra],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )


def wait_for_line(process: subprocess.Popen, fragment: str, timeout: float = 240.0) -> list[str]:
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if fragment in line:
            return lines
    process.kill()
    raise AssertionError(f"never saw {fragment!r}; output:\n{''.join(lines)}")


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_checkpoint_exits_and_resume_finishes(tmp_path, signum, code):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, steps=300))
    process = start_fit(cfg)
    wait_for_line(process, "step 20/300")
    process.send_signal(signum)
    output, _ = process.communicate(timeout=240)
    assert process.returncode == code, output
    assert "saved a resumable checkpoint" in output and "--resume" in output
    saved = sorted((tmp_path / "run" / "ckpt").glob("step_*.pt"))
    assert len(saved) == 1
    stopped_at = load_checkpoint_file(saved[0])["step"]
    assert 20 <= stopped_at < 300
    assert load_checkpoint_file(tmp_path / "run" / "ckpt" / "last.pt")["step"] == stopped_at

    resumed = subprocess.run(
        [sys.executable, "-m", "splattrain", "fit", "--config", str(cfg), "--resume", "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert json.loads((tmp_path / "run" / "results.json").read_text())["steps"] == 300


def test_sigusr1_snapshots_and_training_goes_on(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, steps=120))
    process = start_fit(cfg)
    wait_for_line(process, "step 20/120")
    process.send_signal(signal.SIGUSR1)
    output, _ = process.communicate(timeout=240)
    assert process.returncode == 0, output
    assert "SIGUSR1: saved a snapshot" in output
    steps = sorted(int(p.stem.split("_")[1]) for p in (tmp_path / "run" / "ckpt").glob("step_*.pt"))
    assert len(steps) == 2 and 20 <= steps[0] < 120 and steps[1] == 120


def test_without_auto_checkpoint_sigint_stops_cleanly_and_sigusr1_is_ignored(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, steps=300))
    process = start_fit(cfg, "default_hooks.auto_checkpoint=null", "default_hooks.checkpoint.interval=0")
    wait_for_line(process, "step 20/300")
    process.send_signal(signal.SIGUSR1)
    wait_for_line(process, "no AutoCheckpointHook saves snapshots")
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=240)
    assert process.returncode == 130, output
    assert "SIGINT received: the run stops after step" in output and "without a checkpoint" in output
    assert output.strip().splitlines()[-1] == "stopped by SIGINT" and "Traceback" not in output
    assert not (tmp_path / "run" / "results.json").exists() and not list((tmp_path / "run").rglob("*.pt"))


def test_auto_checkpoint_signals_choose_what_is_saved(tmp_path):
    """A stop signal the hook does not save on still stops the run, with nothing saved."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, steps=300))
    process = start_fit(cfg, "default_hooks.auto_checkpoint.signals=[SIGTERM]")
    wait_for_line(process, "step 20/300")
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=240)
    assert process.returncode == 130, output
    assert "no AutoCheckpointHook saves on SIGINT" in output
    assert not list((tmp_path / "run" / "ckpt").glob("step_*.pt"))


@HOOKS.register()
class CrashingHook(Hook):
    """Fails at a given step (test helper)."""

    def __init__(self, at: int = 5) -> None:
        super().__init__()
        self.at = at

    def after_backward(self, trainer, step, outputs):
        if step == self.at:
            raise RuntimeError("simulated crash")


def make_trainer(tmp_path, extra="", overrides=(), steps=12):
    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=steps, extra=extra))
    return DefaultTrainer(load_config(tmp_path / "cfg.yaml", list(overrides)), console=Console(quiet=True))


def test_crash_saves_rescue_checkpoint_of_last_completed_step_and_restores_handlers(tmp_path):
    before = signal.getsignal(signal.SIGINT)
    trainer = make_trainer(tmp_path, extra="custom_hooks:\n  - type: CrashingHook\n    at: 5\n")
    with pytest.raises(Exception, match="simulated crash"):
        trainer.train()
    rescue = load_checkpoint_file(tmp_path / "run" / "ckpt" / "rescue_step_000004.pt")
    assert rescue["step"] == 4 and "optimizers" in rescue
    assert signal.getsignal(signal.SIGINT) is before


class SleepyHook(Hook):
    """Sleeps a fixed time at two points (test helper)."""

    def before_train_iter(self, trainer, step, batch):
        time.sleep(0.002)

    def after_train_iter(self, trainer, step, batch, outputs):
        time.sleep(0.003)


def test_hook_timing_adds_up_to_time_in_hooks(tmp_path):
    trainer = make_trainer(tmp_path, steps=20, overrides=["trainer.hook_timing=summary"])
    trainer.register_hook(SleepyHook())
    trainer.train()
    hooks = trainer.hooks
    per_hook = sum(hooks.seconds.values())
    assert per_hook == pytest.approx(hooks.total_seconds, rel=0.05)
    assert hooks.calls[("SleepyHook", "before_train_iter")] == 20
    assert hooks.seconds[("SleepyHook", "after_train_iter")] >= 20 * 0.003
    rows = hooks.timing_rows(trainer.train_seconds)
    totals = [float(row[3]) for row in rows]
    assert totals == sorted(totals, reverse=True)  # slowest first
    assert ["SleepyHook", "after_train_iter", "20"] in [row[:3] for row in rows]
    assert "time in hooks" in (tmp_path / "run" / "log.txt").read_text()


def test_iter_timer_publishes_times_and_eta(tmp_path):
    trainer = make_trainer(tmp_path, steps=10)
    seen = []

    class Probe(Hook):
        priority = 100

        def after_train_iter(self, trainer, step, batch, outputs):
            seen.append(dict(trainer.runtime_info))

    trainer.register_hook(Probe())
    trainer.train()
    assert {"time/data", "time/step", "time/eta"} <= set(seen[-1])
    assert seen[-1]["time/eta"] == pytest.approx(0.0, abs=1e-9)
    assert all(0 <= s["time/data"] < s["time/step"] for s in seen[1:])


def test_validation_controls(tmp_path):
    trainer = make_trainer(tmp_path, overrides=["trainer.val_interval=3", "trainer.val_begin=7"], steps=12)
    steps = []

    class Probe(Hook):
        def after_val(self, trainer, metrics):
            steps.append(trainer.step)

    trainer.register_hook(Probe())
    trainer.train()
    assert steps == [9, 12]
    resumed = make_trainer(tmp_path, overrides=["trainer.val_on_resume=true", "trainer.max_steps=14"], steps=12)
    resumed.register_hook(Probe())
    steps.clear()
    resumed.train(resume="latest")
    assert steps == [12, 14]


def test_profiler_writes_trace_and_top_operators(tmp_path):
    trainer = make_trainer(tmp_path, extra="custom_hooks:\n  - {type: ProfilerHook, start: 3, steps: 2, top: 30}\n",
                           steps=8)
    trainer.train()
    hook = next(h for h in trainer.hooks.hooks if type(h).__name__ == "ProfilerHook")
    trace = json.loads(hook.trace_path.read_text())
    assert hook.trace_path == tmp_path / "run" / "profiler" / "trace_step_000003.json"
    assert any(event.get("name", "").startswith("aten::") for event in trace["traceEvents"])
    assert "Self CPU" in hook.summary and "aten::" in hook.summary


def test_empty_cache_is_a_no_op_on_cpu(tmp_path):
    trainer = make_trainer(tmp_path, extra="custom_hooks:\n  - {type: EmptyCacheHook, before_val: true, interval: 2}\n",
                           steps=6)
    trainer.train()
    hook = next(h for h in trainer.hooks.hooks if type(h).__name__ == "EmptyCacheHook")
    assert hook.freed == 0


CRASH_AT = '''
from splattrain import HOOKS, Hook


@HOOKS.register()
class CrashAt(Hook):
    def __init__(self, at: int = 5):
        super().__init__()
        self.at = at

    def after_train_iter(self, trainer, step, batch, outputs):
        if step == self.at:
            raise RuntimeError("simulated crash")
'''


def test_rescue_hint_is_a_shell_command_and_the_resumed_header_shows_the_checkpoints_gaussians(tmp_path):
    """In a folder whose name has a space and a quote, the printed hint runs as it is; the resumed
    run's header counts the checkpoint's Gaussians (MCMC grew them), not the initial 300."""
    import shlex

    folder = tmp_path / "my runs 'A'"
    folder.mkdir()
    (folder / "crash_at.py").write_text(CRASH_AT)
    extra = ("imports: [crash_at.py]\ncustom_hooks:\n  - {type: CrashAt, at: 5}\n"
             "strategy: {type: mcmc, max_gaussians: 1000, refine_start_iter: 2, refine_every: 2}\n")
    cfg = folder / "cfg.yaml"
    cfg.write_text(tiny_config_text(folder, steps=8, extra=extra))
    command = [sys.executable, "-m", "splattrain", "fit", "--config", str(cfg)]
    crashed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert crashed.returncode != 0
    line = next(line for line in crashed.stdout.splitlines() if "Resume with: " in line)
    words = shlex.split(line.split("Resume with: ", 1)[1])
    assert words[:2] == ["splattrain", "fit"] and words[-2] == "--resume"
    rescue = Path(words[-1])
    gaussians = load_checkpoint_file(rescue)["gaussians"]["means"].shape[0]
    assert rescue.name == "rescue_step_000005.pt" and gaussians > 300
    resumed = subprocess.run([sys.executable, "-m", *words[:-1], str(rescue), "custom_hooks=[]"],
                             cwd=REPO, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"gaussians {gaussians:,}  steps 8" in resumed.stdout.replace("\u2009", ",")
