"""Device hygiene: no tensor in a training run is created on the default device by accident.

This machine has no GPU, so a CUDA run cannot show a tensor left on the CPU. Instead the run
trains on the CPU while the *default* device is ``meta``: the model, data and every tensor made
with an explicit ``device=`` (or ``*_like`` / ``new_*`` of a device tensor) stay on the CPU, and any
tensor created without one -- the bug that on a GPU run puts a tensor on the CPU -- lands on
``meta``. A dispatch mode fails the test at the first operation that produces a ``meta`` tensor,
naming the splattrain line that asked for it.
"""

from __future__ import annotations

import traceback

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from resume_check import make_trainer, single_thread  # noqa: F401

HOOKS = """
custom_hooks:
  - {type: CheckInvalidLossHook, policy: skip}
  - {type: GradClipHook, mode: moving_average, tolerance: 3.0}
  - {type: EMAHook, momentum: 0.5, begin: 2}
  - {type: MemoryBudgetHook, max_memory: 64000, warmup_steps: 3}
default_hooks:
  logger: {interval: 2}
"""


class NoDefaultDeviceTensors(TorchDispatchMode):
    """Raises at the first operation whose output is on the ``meta`` device."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outputs = out if isinstance(out, (tuple, list)) else [out]
        if any(isinstance(t, torch.Tensor) and t.device.type == "meta" for t in outputs):
            frames = [f for f in traceback.extract_stack() if "/splattrain/" in f.filename]
            where = f"{frames[-1].filename}:{frames[-1].lineno} {frames[-1].line}" if frames else "outside splattrain"
            raise AssertionError(f"{func} made a tensor on the default device at {where}")
        return out


@pytest.mark.parametrize("strategy", ["default", "mcmc"])
def test_no_tensor_lands_on_the_default_device(tmp_path, strategy):
    overrides = ["writers=[{type: csv}, {type: jsonl}]", "strategy.refine_start_iter=1", "strategy.refine_every=2",
                 "trainer.val_interval=3"]
    if strategy == "mcmc":
        overrides += ["strategy.type=mcmc", "strategy.max_gaussians=330"]
    trainer = make_trainer(tmp_path, "run", steps=6, extra=HOOKS, overrides=overrides)
    with torch.device("meta"), NoDefaultDeviceTensors():
        trainer.train()
    assert len(trainer.writers) == 2 and "ema_loss" in (tmp_path / "run" / "scalars.csv").read_text()
    assert trainer.step == 6 and trainer.model.num_gaussians != 300  # densification ran inside the check
    assert all(p.device.type == "cpu" for p in trainer.model.params.values())


def test_the_check_catches_a_tensor_made_without_a_device():
    with torch.device("meta"), NoDefaultDeviceTensors(), pytest.raises(AssertionError, match="default device"):
        torch.zeros(3)
