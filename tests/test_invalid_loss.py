"""CheckInvalidLossHook: an injected NaN stops the run (after a rescue checkpoint) or skips the step."""

from __future__ import annotations

import pytest
import torch

from resume_check import assert_same_run, make_trainer, straight_and_resumed, single_thread  # noqa: F401
from splattrain.checkpoints.files import load_checkpoint_file
from splattrain.hooks import Hook, HookError


class PoisonImage(Hook):
    """Puts a NaN into the first view's image at the given steps; records the Gaussians after each step."""

    def __init__(self, steps) -> None:
        super().__init__()
        self.steps = set(steps)
        self.views = {}
        self.after = {}

    def before_train_iter(self, trainer, step, batch):
        if step in self.steps:
            batch["image"][0, 0, 0, 0] = float("nan")
            self.views[step] = batch["camera"][0].name

    def after_train_iter(self, trainer, step, batch, outputs):
        self.after[step] = trainer.model.state_dict()


def hook_config(**options) -> str:
    items = ", ".join(f"{k}: {v}" for k, v in options.items())
    return f"custom_hooks:\n  - {{type: CheckInvalidLossHook, {items}}}\n"


def test_raise_names_term_step_and_view_after_saving_the_last_good_state(tmp_path, monkeypatch):
    poison = PoisonImage([4])
    trainer = make_trainer(tmp_path, "run", steps=6, extra=hook_config(policy="raise"), hooks=[poison])
    warnings = []
    monkeypatch.setattr(trainer.console, "warning", lambda message, once=None: warnings.append(message))
    with pytest.raises(HookError) as caught:
        trainer.train()
    message = str(caught.value)
    assert "invalid loss at step 4" in message and "l1 = nan" in message and "loss = nan" in message
    assert f"views: {poison.views[4]})" in message
    rescue = tmp_path / "run" / "ckpt" / "rescue_step_000003.pt"
    assert any(str(rescue) in warning for warning in warnings)  # the run says where the last good state is
    saved = load_checkpoint_file(rescue)
    assert saved["step"] == 3
    for name, value in poison.after[3].items():  # the parameters of the last good step, never updated
        assert torch.equal(saved["gaussians"][name], value)
        assert torch.equal(trainer.model.params[name].detach(), value)


def test_skip_drops_the_update_then_stops_at_the_limit(tmp_path):
    poison = PoisonImage([3, 5])
    trainer = make_trainer(tmp_path, "run", steps=6, extra=hook_config(policy="skip", max_skips=1), hooks=[poison])
    with pytest.raises(HookError, match="invalid loss at step 5.*1 steps skipped already, the limit is 1"):
        trainer.train()
    for name, value in poison.after[2].items():
        assert torch.equal(poison.after[3][name], value), name  # step 3 changed nothing
    assert not torch.equal(poison.after[4]["means"], poison.after[3]["means"])  # step 4 trained
    assert (tmp_path / "run" / "ckpt" / "rescue_step_000004.pt").is_file()


def test_resume_keeps_the_skip_count(tmp_path):
    straight, resumed = straight_and_resumed(
        tmp_path, extra=hook_config(policy="skip", max_skips=5), hooks=lambda: [PoisonImage([2, 9])]
    )
    counts = [next(h.skips for h in t.hooks.hooks if h.name == "CheckInvalidLossHook") for t in (straight, resumed)]
    assert counts == [2, 2]
    assert_same_run(straight, resumed, hooks=["CheckInvalidLossHook"])


class PoisonLoss(Hook):
    """Adds a NaN term to the step's own loss at ``step`` (a render done again would not show it)."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step, self.view = step, None

    def before_backward(self, trainer, step, losses):
        if step == self.step:
            losses["poisoned"] = torch.tensor(float("nan"))
            losses["loss"] = losses["loss"] + losses["poisoned"]

    def before_train_iter(self, trainer, step, batch):
        if step == self.step:
            self.view = batch["camera"][0].name


def test_the_diagnosis_names_the_views_of_the_steps_own_losses(tmp_path):
    """The views are named from the losses the step computed (its corrections and hooks included),
    not from a second render that could come out finite."""
    poison = PoisonLoss(3)
    trainer = make_trainer(tmp_path, "run", steps=5, extra=hook_config(policy="raise"), hooks=[poison])
    with pytest.raises(HookError) as caught:
        trainer.train()
    message = str(caught.value)
    assert "invalid loss at step 3" in message and "poisoned = nan" in message
    assert f"views: {poison.view})" in message
