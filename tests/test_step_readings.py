"""The engine's one clock and one loss average: what IterTimerHook, LogHook and the viewer show,
a resumed run's log, the options they replaced, and no hook timing steps on its own."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch

from cli_check import assert_one_line_error, run_cli, write_config
from conftest import REPO
from resume_check import make_trainer, single_thread  # noqa: F401  (one thread in every test here)
from splattrain.checkpoints.files import load_checkpoint_file, save_checkpoint_file
from splattrain.engine.clock import Stopwatch
from splattrain.errors import CheckpointError
from splattrain.hooks import Hook

#: Every step logged to metrics.jsonl; a checkpoint at step 6 (resume_check's settings).
LOGGED = ["writers=[{type: jsonl}]", "default_hooks.logger.interval=1"]
STEPS = 12


def logged(run_dir: Path) -> Dict[int, Dict[str, Any]]:
    """metrics.jsonl's training rows by step."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row for row in rows if "train/ema_loss" in row}


class Probe(Hook):
    """Records what a hook reads after every step: the clock, runtime_info and the loss average."""

    priority = 100

    def __init__(self) -> None:
        super().__init__()
        self.seen: List[Dict[str, Any]] = []

    def after_train_iter(self, trainer, step, batch, outputs):
        self.seen.append({"step": step, "clock": trainer.clock, "info": dict(trainer.runtime_info),
                          "average": float(trainer.loss_average)})


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """A 12-step run logging every step, with a Probe, and the folder it ran in."""
    root = tmp_path_factory.mktemp("readings")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        probe = Probe()
        trainer = make_trainer(root, "straight", steps=STEPS, overrides=LOGGED, hooks=[probe])
        trainer.train()
    finally:
        torch.set_num_threads(threads)
    return root, trainer, probe


def test_a_resumed_run_logs_the_straight_runs_ema_loss_step_for_step(straight, tmp_path):
    root, _, _ = straight
    straight_log = logged(root / "straight")
    checkpoint = root / "straight" / "ckpt" / "step_000006.pt"
    assert load_checkpoint_file(checkpoint)["loss_average"] == straight_log[6]["train/ema_loss"]
    resumed = make_trainer(tmp_path, "resumed", steps=STEPS, overrides=LOGGED)
    resumed.train(resume=checkpoint)
    resumed_log = logged(tmp_path / "resumed")
    assert sorted(resumed_log) == list(range(7, STEPS + 1))
    for step in resumed_log:
        assert resumed_log[step]["train/loss"] == straight_log[step]["train/loss"], step
        assert resumed_log[step]["train/ema_loss"] == straight_log[step]["train/ema_loss"], step
    assert straight_log[STEPS]["train/ema_loss"] != straight_log[STEPS]["train/loss"]  # an average, not the loss


def test_a_checkpoint_with_the_loss_average_in_logHooks_state_resumes_the_same(straight, tmp_path):
    """Checkpoints written before the engine kept the average hold it as LogHook's ``ema_loss``."""
    root, _, _ = straight
    state = load_checkpoint_file(root / "straight" / "ckpt" / "step_000006.pt")
    state["hooks"]["logger"] = {**state["hooks"].get("logger", {}), "ema_loss": state.pop("loss_average")}
    save_checkpoint_file(state, tmp_path / "older.pt")
    resumed = make_trainer(tmp_path, "resumed", steps=STEPS, overrides=LOGGED)
    resumed.train(resume=tmp_path / "older.pt")
    straight_log, resumed_log = logged(root / "straight"), logged(tmp_path / "resumed")
    assert [resumed_log[s]["train/ema_loss"] for s in range(7, STEPS + 1)] == \
        [straight_log[s]["train/ema_loss"] for s in range(7, STEPS + 1)]


def test_a_checkpoint_whose_loss_average_is_not_a_number_is_refused(straight, tmp_path):
    root, _, _ = straight
    state = load_checkpoint_file(root / "straight" / "ckpt" / "step_000006.pt")
    state["loss_average"] = "abc"
    save_checkpoint_file(state, tmp_path / "bad.pt")
    trainer = make_trainer(tmp_path, "resumed", steps=STEPS, overrides=LOGGED)
    with pytest.raises(CheckpointError, match="'loss_average' is 'abc', not a number"):
        trainer.train(resume=tmp_path / "bad.pt")
    assert not (tmp_path / "resumed" / "metrics.jsonl").exists()


def test_the_log_writes_the_engines_loss_average(straight):
    root, _, probe = straight
    log = logged(root / "straight")
    assert [log[s["step"]]["train/ema_loss"] for s in probe.seen] == [s["average"] for s in probe.seen]
    average = torch.tensor(log[1]["train/loss"], dtype=torch.float32)  # 0.6 old + 0.4 new, in float32
    for step in range(2, STEPS + 1):
        average.mul_(0.6).add_(torch.tensor(log[step]["train/loss"], dtype=torch.float32), alpha=0.4)
        assert float(average) == log[step]["train/ema_loss"], step


def test_trainer_loss_ema_sets_the_weight(tmp_path):
    trainer = make_trainer(tmp_path, "slow", steps=4, overrides=LOGGED + ["trainer.loss_ema=0.9"])
    trainer.train()
    log = logged(tmp_path / "slow")
    average = torch.tensor(log[1]["train/loss"], dtype=torch.float32)
    for step in range(2, 5):
        average.mul_(0.9).add_(torch.tensor(log[step]["train/loss"], dtype=torch.float32), alpha=1.0 - 0.9)
        assert float(average) == log[step]["train/ema_loss"], step
    assert float(trainer.loss_average) == log[4]["train/ema_loss"]


def test_the_timer_and_the_log_publish_the_engines_clock(straight):
    root, trainer, probe = straight
    log = logged(root / "straight")
    mean = None
    for number, seen in enumerate(probe.seen, start=1):
        clock, info = seen["clock"], seen["info"]
        assert clock.step == seen["step"] == number and clock.timed_steps == number
        assert (info["time/step"], info["time/data"], info["time/eta"]) == \
            (clock.step_seconds, clock.data_seconds, clock.eta_seconds)
        assert 0 <= clock.data_seconds < clock.step_seconds
        mean = clock.step_seconds if mean is None else 0.9 * mean + 0.1 * clock.step_seconds
        assert clock.mean_step_seconds == pytest.approx(mean, rel=1e-12)
        assert clock.eta_seconds == clock.mean_step_seconds * (STEPS - number)
        assert log[number]["time/step_ms"] == pytest.approx(1000.0 * clock.step_seconds, rel=1e-9)
        assert log[number]["time/step"] == clock.step_seconds
    last = probe.seen[-1]["clock"]
    assert last.eta_seconds == 0.0 and last.steps_per_second == 1.0 / last.mean_step_seconds
    assert last.timed_seconds == pytest.approx(sum(s["clock"].step_seconds for s in probe.seen), rel=1e-9)
    assert last.timed_seconds <= trainer.train_seconds  # what ran after the last step's lap is counted too
    saved = json.loads((root / "straight" / "results.json").read_text())
    assert saved["train_seconds"] == round(trainer.train_seconds, 3)


class FakeTime:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_stopwatch_leaves_pauses_and_the_time_between_steps_out():
    time = FakeTime()
    watch = Stopwatch(time)
    watch.start_step()
    time.now = 1.0
    watch.data_ready()
    time.now = 2.0
    watch.pause()
    time.now = 5.0  # 3 s paused
    watch.resume()
    time.now = 6.0
    first = watch.lap(1, 3)
    assert (first.step, first.step_seconds, first.data_seconds, first.mean_step_seconds) == (1, 3.0, 1.0, 3.0)
    assert first.eta_seconds == 6.0
    time.now = 7.0  # the step's after_train_iter hooks: 1 s, counted in the next lap
    watch.end_step()
    time.now = 20.0  # validation and checkpoints between the steps: left out
    watch.pause()
    watch.resume()  # a pause between steps starts nothing
    time.now = 30.0
    watch.start_step()
    time.now = 30.5
    watch.data_ready()
    time.now = 32.0
    second = watch.lap(2, 3)
    assert (second.step_seconds, second.data_seconds) == (3.0, 0.5)
    assert second.mean_step_seconds == 3.0 and second.eta_seconds == 3.0
    assert (second.timed_steps, second.timed_seconds) == (2, 6.0)
    time.now = 32.25
    watch.end_step()
    assert watch.total_seconds == 6.25


@pytest.mark.parametrize("setting, fragments", [
    ("default_hooks.logger.ema=0.8", ["LogHook ema 0.8", "weighted by trainer.loss_ema"]),
    ("default_hooks.timer.momentum=0.8", ["IterTimerHook momentum", "trainer.clock"]),
    ("trainer.loss_ema=1.5", ["trainer.loss_ema 1.5", "[0, 1)"]),
])
def test_the_replaced_options_are_refused_in_one_line(tmp_path, setting, fragments):
    config = write_config(tmp_path, tmp_path / "run")
    result = run_cli("fit", "--config", str(config), "--quiet", setting)
    assert_one_line_error(result, *fragments)
    assert not (tmp_path / "run" / "results.json").exists()


def test_a_config_naming_iter_timer_hook_still_trains(tmp_path):
    config = write_config(tmp_path, tmp_path / "run", steps=2,
                          extra="default_hooks:\n  timer: null\ncustom_hooks:\n  - type: IterTimerHook\n")
    config.write_text(config.read_text().replace("writers: []", "writers:\n  - {type: jsonl}"))
    result = run_cli("fit", "--config", str(config), "--quiet", "default_hooks.logger.interval=1")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = logged(tmp_path / "run")
    assert sorted(rows) == [1, 2] and all(row["time/step"] > 0 and "time/eta" in row for row in rows.values())


# -- no hook times steps -------------------------------------------------------------------
CLOCKS = {"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns", "process_time"}

#: (module, function) pairs of splattrain/hooks/ that may read a clock, and why: none of them times a step.
ALLOWED = {
    ("dispatch.py", "run"): "times each hook call for trainer.hook_timing's table (the hooks, not the step)",
    ("contribution_prune.py", "after_train_iter"): "the length of its own scoring pass, in the line it prints",
    ("viewer_hook.py", "_ask_pause"): "how long a pause the viewer asked for lasted (paused_seconds)",
    ("viewer_hook.py", "wait"): "the same pause, as it ends",
    ("viewer_hook.py", "_update_stats"): "throttles the stats panel to two updates a second",
}


def clock_reads(path: Path) -> List[tuple]:
    """(module, enclosing function, line) of every read of a clock of the ``time`` module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    imported = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "time" for alias in node.names if alias.name in CLOCKS}
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if (isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name) and child.value.id == "time"
                    and child.attr in CLOCKS) or (isinstance(child, ast.Name) and child.id in imported):
                found.append((path.name, function, child.lineno))
            visit(child, inner)

    visit(tree, "<module>")
    return found


def test_no_hook_times_steps_on_its_own():
    reads = [read for path in sorted((REPO / "splattrain" / "hooks").glob("*.py")) for read in clock_reads(path)]
    outside = [read for read in reads if read[:2] not in ALLOWED]
    assert not outside, f"hooks read a clock (the engine's trainer.clock times the steps): {outside}"
    assert {read[:2] for read in reads} == set(ALLOWED)  # each allowance is still needed


def test_the_clock_scan_is_not_blind(tmp_path):
    module = tmp_path / "timer.py"
    module.write_text("import time\nfrom time import monotonic as tick\n\n"
                      "def after_train_iter(self, trainer):\n    started = time.perf_counter()\n    return tick()\n")
    assert clock_reads(module) == [("timer.py", "after_train_iter", 5), ("timer.py", "after_train_iter", 6)]
