"""Hook base class, priorities, dispatch, and config-built hooks."""

from __future__ import annotations

import pytest

from splattrain.errors import ConfigError
from splattrain.hooks import HOOK_POINTS, Hook, HookDispatcher, HookError, Priority, get_priority
from splattrain.hooks.specs import build_hook, hook_specs


class Calls(list):
    pass


def recorder(name: str, priority, calls: Calls):
    class Recorder(Hook):
        def before_train_iter(self, trainer, step, batch):
            calls.append((name, step))

    Recorder.__name__ = name
    return Recorder(priority=priority)


def test_priorities_named_and_int():
    assert get_priority("HIGH") == 30 and get_priority("very_low") == 90
    assert get_priority(Priority.LOWEST) == 100 and get_priority(42) == 42
    with pytest.raises(ValueError, match="unknown priority"):
        get_priority("URGENT")
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        get_priority(101)


def test_lower_priority_first_ties_in_registration_order():
    calls = Calls()
    dispatcher = HookDispatcher()
    for name, prio in [("a", "LOW"), ("b", 10), ("c", "LOW"), ("d", "NORMAL"), ("e", 10)]:
        dispatcher.register(recorder(name, prio, calls))
    dispatcher.run("before_train_iter", dispatcher.entries["before_train_iter"], None, (7, {}))
    assert [n for n, _ in calls] == ["b", "e", "d", "a", "c"]
    assert all(step == 7 for _, step in calls)


def test_dispatch_only_lists_overriding_hooks():
    dispatcher = HookDispatcher()
    dispatcher.register(recorder("r", 50, Calls()))
    dispatcher.register(Hook())
    assert [type(h).__name__ for h, _ in dispatcher.entries["before_train_iter"]] == ["r"]
    assert all(dispatcher.entries[p] == [] for p in HOOK_POINTS if p != "before_train_iter")
    assert dispatcher.table() == [("before_train_iter", ["r (NORMAL)"])]


def test_exception_names_hook_and_point():
    class Broken(Hook):
        def after_val(self, trainer, metrics):
            raise ValueError("bad metric")

    dispatcher = HookDispatcher()
    dispatcher.register(Broken())
    with pytest.raises(HookError, match=r"Broken\.after_val failed: ValueError: bad metric") as info:
        dispatcher.run("after_val", dispatcher.entries["after_val"], None, ({},))
    assert isinstance(info.value.__cause__, ValueError)


def test_every_n_steps_and_last_step():
    class T:
        step = 0
        max_steps = 10

    hook, trainer = Hook(), T()
    hits = []
    for step in range(1, 11):
        trainer.step = step
        if hook.every_n_steps(trainer, 4):
            hits.append(step)
    assert hits == [4, 8]
    trainer.step = 6
    assert hook.every_n_steps(trainer, 3, start=3) and not hook.every_n_steps(trainer, 0)
    assert not hook.is_last_step(trainer)
    trainer.step = 10
    assert hook.is_last_step(trainer)


def test_default_hooks_override_disable_and_custom():
    specs = hook_specs(
        {"logger": {"interval": 5}, "checkpoint": None},
        [{"type": "LogHook"}, {"type": "LogHook", "priority": "HIGHEST"}],
    )
    assert ("logger", {"type": "LogHook", "interval": 5}) in specs
    assert [name for name, _ in specs] == ["timer", "logger", "auto_checkpoint", "LogHook", "LogHook_2"]
    hook = build_hook(*specs[4])
    assert hook.priority == 0 and hook.name == "LogHook_2"


def test_default_hooks_unknown_name_is_error():
    with pytest.raises(ConfigError, match="default_hooks.loger"):
        hook_specs({"loger": {"interval": 5}}, [])


def test_build_hook_rejects_non_hooks_and_bad_priority():
    with pytest.raises(ConfigError, match="unknown hook type 'NoSuchHook'"):
        build_hook("x", {"type": "NoSuchHook"})
    with pytest.raises(ConfigError, match="unknown priority"):
        build_hook("x", {"type": "LogHook", "priority": "SOON"})


class _Counter(Hook):
    def __init__(self, start: int = 0) -> None:
        super().__init__()
        self.count = start

    def after_train_iter(self, trainer, step, batch, outputs):
        self.count += 1

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = state["count"]


class _NoSuperInit(Hook):
    """A hook whose __init__ skips super().__init__() and names its priority as a string."""

    priority = "LOW"

    def __init__(self) -> None:
        self.seen = True

    def after_train_iter(self, trainer, step, batch, outputs):
        pass


def test_state_keys_are_unique_for_repeated_hooks_registered_in_code():
    dispatcher = HookDispatcher()
    first, second, third = _Counter(1), _Counter(2), _Counter(3)
    for hook in (first, second, third):
        dispatcher.register(hook)
    assert [h.state_key for h in dispatcher.hooks] == ["_Counter", "_Counter_2", "_Counter_3"]


def test_config_names_and_code_registrations_never_collide():
    dispatcher = HookDispatcher()
    named = build_hook("_Counter", {"type": "CheckInvalidLossHook"})
    dispatcher.register(named)
    dispatcher.register(_Counter())
    assert {h.state_key for h in dispatcher.hooks} == {"_Counter", "_Counter_2"}


def test_priority_is_normalised_even_without_super_init():
    dispatcher = HookDispatcher()
    late, normal = _NoSuperInit(), _Counter()
    dispatcher.register(late)
    dispatcher.register(normal)
    assert late.priority == int(Priority.LOW) == 70
    assert [type(h) for h in dispatcher.hooks] == [_Counter, _NoSuperInit]
    assert dispatcher.table() == [("after_train_iter", ["_Counter (NORMAL)", "_NoSuperInit (LOW)"])]


def test_two_instances_keep_their_own_checkpoint_state(tmp_path):
    from resume_check import make_trainer

    trainer = make_trainer(tmp_path, "run", steps=3, hooks=[_Counter(10), _Counter(100)])
    trainer.train()
    saved = trainer.checkpoint_state()["hooks"]
    assert saved["_Counter"] == {"count": 13} and saved["_Counter_2"] == {"count": 103}
    resumed = make_trainer(tmp_path, "again", steps=3, hooks=[_Counter(), _Counter()])
    resumed.train(resume=tmp_path / "run" / "ckpt" / "last.pt")
    counters = [h for h in resumed.hooks.hooks if isinstance(h, _Counter)]
    assert [c.count for c in counters] == [13, 103]


def test_hook_timing_modes_and_the_values_of_older_configs():
    from splattrain.hooks.dispatch import timing_mode

    assert [timing_mode(v) for v in ("auto", "Summary", "off", True, False, "True", "false")] == \
        ["auto", "summary", "off", "summary", "off", "summary", "off"]
    with pytest.raises(ConfigError, match="trainer.hook_timing must be auto, summary or off, got 'sometimes'"):
        timing_mode("sometimes")
    assert HookDispatcher("off").timing is False and HookDispatcher().timing_mode == "auto"


def test_auto_reports_hook_timing_only_when_hooks_take_a_share_of_the_steps():
    from splattrain.hooks.dispatch import SLOW_HOOKS_SECONDS, SLOW_HOOKS_SHARE

    auto, summary, off = HookDispatcher("auto"), HookDispatcher("summary"), HookDispatcher("off")
    for dispatcher in (auto, summary, off):
        assert not dispatcher.timing_report_due(20.0)  # nothing timed yet
        dispatcher.seconds[("LogHook", "after_train_iter")] = 0.8
        dispatcher.seconds[("LogHook", "after_val")] = 5.0  # validation is not part of the steps' time
    assert auto.step_share(20.0) == pytest.approx(0.04) and 0.04 < SLOW_HOOKS_SHARE
    assert not auto.timing_report_due(20.0) and summary.timing_report_due(20.0) and not off.timing_report_due(20.0)
    auto.seconds[("Slow", "before_train_iter")] = 0.4
    assert auto.timing_report_due(20.0)
    short = HookDispatcher("auto")  # a one-step run: a large share, but under a second in all
    short.seconds[("LogHook", "after_train_iter")] = 0.5 * SLOW_HOOKS_SECONDS
    assert short.step_share(0.6) > SLOW_HOOKS_SHARE and not short.timing_report_due(0.6)
