"""Stop signals are recorded where they land and acted on at safe points."""

import os
import signal

import pytest

from splattrain import interrupts


@pytest.fixture
def deferred():
    interrupts.defer()
    try:
        yield
    finally:
        interrupts.restore()


def test_a_signal_waits_for_the_next_safe_point(deferred):
    os.kill(os.getpid(), signal.SIGTERM)
    assert interrupts.pending() == signal.SIGTERM  # recorded, nothing raised where it landed
    with pytest.raises(interrupts.Interrupted) as raised:
        interrupts.check()
    assert raised.value.signum == signal.SIGTERM and isinstance(raised.value, KeyboardInterrupt)
    assert interrupts.pending() is None
    interrupts.check()  # acted on once


def test_a_second_signal_stops_at_once(deferred):
    os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(interrupts.Interrupted) as raised:
        os.kill(os.getpid(), signal.SIGINT)
    assert raised.value.signum == signal.SIGINT


def test_during_a_run_signals_are_recorded_and_snapshots_too_then_handlers_restored():
    watched = (*interrupts.STOP_SIGNALS, interrupts.SNAPSHOT_SIGNAL)
    before = {s: signal.getsignal(s) for s in watched}
    with interrupts.during_run() as handled:
        assert handled
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)  # a second stop signal is recorded, not raised mid-step
        assert interrupts.take_snapshot() and not interrupts.take_snapshot()
        assert interrupts.take() == signal.SIGTERM and interrupts.pending() is None
        os.kill(os.getpid(), signal.SIGINT)
    assert {s: signal.getsignal(s) for s in watched} == before
    assert interrupts.pending() is None  # what the run's own handlers recorded is forgotten


def test_a_run_under_the_command_line_leaves_a_late_signal_to_it(deferred):
    with interrupts.during_run():
        os.kill(os.getpid(), signal.SIGINT)
    assert interrupts.pending() == signal.SIGINT
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
    with pytest.raises(interrupts.Interrupted):  # outside the run a second one stops at once again
        os.kill(os.getpid(), signal.SIGINT)


def test_restore_puts_back_the_previous_handlers():
    before = {s: signal.getsignal(s) for s in interrupts.STOP_SIGNALS}
    interrupts.defer()
    assert all(signal.getsignal(s) is not before[s] for s in interrupts.STOP_SIGNALS)
    interrupts.restore()
    assert {s: signal.getsignal(s) for s in interrupts.STOP_SIGNALS} == before


def test_image_decoding_stops_between_images(deferred):
    import time

    from splattrain.data.images import parallel_map

    done = []

    def decode(index: int) -> int:
        if index == 1:
            os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
        done.append(index)
        return index

    with pytest.raises(interrupts.Interrupted):
        parallel_map(decode, list(range(100)), workers=2)
    assert len(done) < 50  # the images not started yet were dropped


STUCK_COMMAND = """
import sys, pathlib
import splattrain.commands.export as export

READY = pathlib.Path(sys.argv[1])

def stuck(*args, **kwargs):  # a pure-Python walk that never reaches a safe point
    READY.touch()
    while True:
        [i * i for i in range(1000)]

export.export = stuck
from splattrain.cli import main
sys.argv = ["splattrain", "export", "anything"]
sys.exit(main())
"""

STUCK_HOOK = """
from pathlib import Path
from splattrain.hooks import Hook
from splattrain.registry import HOOKS


@HOOKS.register()
class StuckHook(Hook):
    def __init__(self, ready: str) -> None:
        super().__init__()
        self.ready = ready

    def after_train_iter(self, trainer, step, batch, outputs):
        if step == 3:
            Path(self.ready).touch()
            while True:  # a step that never ends
                [i * i for i in range(1000)]
"""

#: What the tests allow a stop to take: the product promises 10 s; a loaded machine adds to it.
STOP_BOUND = 30.0


def _stop_once(process, ready, signum) -> tuple:
    """Wait for ``ready`` to appear, send ``signum`` once; (seconds to the exit, output)."""
    import subprocess
    import time

    deadline = time.monotonic() + 240
    while not ready.exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    sent = time.monotonic()
    process.send_signal(signum)
    try:
        output, _ = process.communicate(timeout=STOP_BOUND + 30)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError("one stop signal did not end the process")
    return time.monotonic() - sent, output


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_one_signal_ends_a_command_stuck_in_python_code(tmp_path, signum, code):
    import subprocess
    import sys

    from conftest import REPO

    ready = tmp_path / "stuck"
    process = subprocess.Popen([sys.executable, "-c", STUCK_COMMAND, str(ready)], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    seconds, output = _stop_once(process, ready, signum)
    assert process.returncode == code, output
    assert seconds < STOP_BOUND, seconds
    name = signal.Signals(signum).name
    assert output.strip() == f"stopped by {name}: no safe point came within 5 s; ended at once", output


def test_one_sigterm_ends_a_training_run_whose_step_never_ends(tmp_path):
    import subprocess
    import sys

    from conftest import REPO, tiny_config_text

    (tmp_path / "stuck_hook.py").write_text(STUCK_HOOK)
    ready = tmp_path / "stuck"
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, steps=50, extra=f"imports: [stuck_hook.py]\nrenderer: {{type: torch}}\n"
                                                               f"custom_hooks: [{{type: StuckHook, ready: '{ready}'}}]\n"))
    process = subprocess.Popen([sys.executable, "-m", "splattrain", "fit", "--config", str(cfg), "--quiet"], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds, output = _stop_once(process, ready, signal.SIGTERM)
    assert process.returncode == 143, output
    assert seconds < STOP_BOUND, seconds
    assert "Traceback" not in output
    assert output.strip().splitlines()[-1] == "stopped by SIGTERM: no safe point came within 5 s; ended at once"
    assert not list((tmp_path / "run" / "ckpt").glob("*.pt"))  # no safe point: nothing half-saved either
    assert not list((tmp_path / "run" / "ckpt").glob(".*.tmp")) if (tmp_path / "run" / "ckpt").exists() else True


def test_the_watchdog_is_off_in_process_and_gone_after_restore():
    import threading

    interrupts.defer(watchdog=True)
    try:
        assert any(t.name == "splattrain-stop-watchdog" and t.daemon for t in threading.enumerate())
    finally:
        interrupts.restore()
    interrupts.defer()
    try:
        assert interrupts._watchdog is None
    finally:
        interrupts.restore()
