"""A checkpoint of step k holds the run after step k's validation: a run resumed from a
checkpoint taken at a validation step ends where the straight run ends, for the built-in
EarlyStoppingHook and for a hook of one's own whose state changes in ``after_val``, with no
validation repeated on resume."""

from __future__ import annotations

from typing import Any, Dict, List

from splattrain.checkpoints.files import load_checkpoint_file
from splattrain.hooks import Hook
from resume_check import assert_same_run, make_trainer, single_thread  # noqa: F401

#: Validation every 2 steps; nothing beats the first value by 100 dB: patience 3 stops at step 8.
EARLY = "custom_hooks:\n  - {type: EarlyStoppingHook, patience: 3, min_delta: 100}\n"
OVERRIDES = ["trainer.val_interval=2", "default_hooks.checkpoint.interval=2"]


class ValidationDiary(Hook):
    """Keeps every validation it hears (its step and PSNR) as checkpointed state."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: List[List[Any]] = []

    def after_val(self, trainer, metrics: Dict[str, Any]) -> None:
        self.seen.append([metrics["step"], metrics["psnr"]])

    def state_dict(self) -> Dict[str, Any]:
        return {"seen": [list(entry) for entry in self.seen]}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.seen = [list(entry) for entry in state["seen"]]


def _run(tmp_path, name: str, resume=None):
    trainer = make_trainer(tmp_path, name, steps=20, extra=EARLY, overrides=OVERRIDES, hooks=[ValidationDiary()])
    trainer.train(resume=resume)
    return trainer


def test_a_run_resumed_at_a_validation_step_stops_where_the_straight_run_stops(tmp_path):
    straight = _run(tmp_path, "straight")
    assert straight.stopped is not None and straight.stopped["step"] == 8
    checkpoint = tmp_path / "straight" / "ckpt" / "step_000006.pt"
    saved = load_checkpoint_file(checkpoint)
    assert saved["last_metrics"]["step"] == 6  # saved after the step's validation
    early = saved["hooks"]["EarlyStoppingHook"]
    assert early["last_step"] == 6 and early["bad_validations"] == 2, early
    resumed = _run(tmp_path, "resumed", resume=checkpoint)
    assert resumed.stopped == straight.stopped
    diary = next(h for h in resumed.hooks.hooks if isinstance(h, ValidationDiary))
    assert [step for step, _ in diary.seen] == [2, 4, 6, 8]  # step 6 not validated again
    assert_same_run(straight, resumed, hooks=["EarlyStoppingHook", "ValidationDiary"])
