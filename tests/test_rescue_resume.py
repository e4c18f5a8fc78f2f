"""A failure at any point of a step leaves a rescue checkpoint of the last completed step; resuming
from it reaches the same state as a run that never failed, bit for bit."""

from __future__ import annotations

import threading

import pytest

from resume_check import assert_same_run, make_trainer, single_thread  # noqa: F401
from splattrain.checkpoints.files import load_checkpoint_file
from splattrain.hooks import Hook

FAIL_AT = 8  # a densification step (refine_every 4) and an opacity reset (reset_every 8)
OVERRIDES = ["trainer.val_interval=8"]


class FailOnce(Hook):
    """Raises at ``point`` of step ``FAIL_AT`` (test helper)."""

    def __init__(self, point: str) -> None:
        super().__init__()
        self.point = point

    def _maybe_fail(self, trainer, point: str) -> None:
        if point == self.point and trainer.step == FAIL_AT:
            raise RuntimeError(f"simulated failure in {point}")

    def before_train_iter(self, trainer, step, batch):
        self._maybe_fail(trainer, "before_train_iter")

    def before_backward(self, trainer, step, losses):
        self._maybe_fail(trainer, "before_backward")

    def after_backward(self, trainer, step, outputs):
        self._maybe_fail(trainer, "after_backward")

    def after_train_iter(self, trainer, step, batch, outputs):
        self._maybe_fail(trainer, "after_train_iter")

    def before_val(self, trainer):
        self._maybe_fail(trainer, "before_val")

    def after_val(self, trainer, metrics):
        self._maybe_fail(trainer, "after_val")


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    trainer = make_trainer(tmp_path_factory.mktemp("straight"), "run", overrides=OVERRIDES)
    trainer.train()
    return trainer


@pytest.mark.parametrize("point, completed", [
    ("before_train_iter", FAIL_AT - 1), ("before_backward", FAIL_AT - 1), ("after_backward", FAIL_AT - 1),
    ("after_train_iter", FAIL_AT), ("before_val", FAIL_AT), ("after_val", FAIL_AT),
])
def test_rescue_then_resume_equals_a_straight_run(tmp_path, straight, point, completed):
    failing = make_trainer(tmp_path, "run", overrides=OVERRIDES, hooks=[FailOnce(point)])
    with pytest.raises(RuntimeError, match=f"simulated failure in {point}"):
        failing.train()
    rescues = sorted((tmp_path / "run" / "ckpt").glob("rescue_step_*.pt"))
    assert [p.name for p in rescues] == [f"rescue_step_{completed:06d}.pt"]
    assert load_checkpoint_file(rescues[0])["step"] == completed
    resumed = make_trainer(tmp_path, "run", overrides=OVERRIDES)
    resumed.train(resume=rescues[0])
    assert_same_run(straight, resumed)


def test_the_prefetch_thread_is_stopped_when_a_run_ends_or_fails(tmp_path):
    def prefetchers():
        return [t for t in threading.enumerate() if t.name.startswith("splattrain-prefetch")]

    trainer = make_trainer(tmp_path, "ok", steps=3, overrides=["data.prefetch=true"])
    trainer.train()
    assert trainer.data._prefetcher is not None and not prefetchers()
    failing = make_trainer(tmp_path, "failing", steps=12, overrides=["data.prefetch=true"],
                           hooks=[FailOnce("after_train_iter")])
    with pytest.raises(RuntimeError):
        failing.train()
    assert not prefetchers()
