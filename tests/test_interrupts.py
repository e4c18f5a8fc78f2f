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
