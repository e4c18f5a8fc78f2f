"""Images beyond data.image_budget_mb are decoded when used, and training does not notice."""

from __future__ import annotations

import numpy as np
import torch

from resume_check import make_trainer, single_thread  # noqa: F401
from splattrain.data.images import image_budget_bytes


def test_frames_beyond_the_budget_decode_the_same_pixels_on_use(tmp_path):
    eager = make_trainer(tmp_path, "eager", steps=1)
    lazy = make_trainer(tmp_path, "lazy", steps=1, overrides=["data.image_budget_mb=0.02"])
    held = [f for f in lazy.data.train_frames if f.image is not None]
    # 16x16 views, 768 bytes each counted as RGB: 27 fit in 0.02 MiB, the other 21 are decoded on use
    assert len(held) == 27 and all(f.image is not None for f in lazy.data.train_frames[:27])
    for mine, theirs in zip(lazy.data.train_frames, eager.data.train_frames):
        np.testing.assert_array_equal(mine.pixels(), theirs.pixels())


def test_training_with_a_budget_is_the_same_run(tmp_path):
    eager = make_trainer(tmp_path, "eager", steps=6)
    eager.train()
    lazy = make_trainer(tmp_path, "lazy", steps=6, overrides=["data.image_budget_mb=0.005"])
    lazy.train()
    assert sum(f.image is None for f in lazy.data.train_frames) > 40
    for name, value in eager.model.state_dict().items():
        assert torch.equal(value, lazy.model.state_dict()[name]), name
    assert lazy.last_metrics["psnr"] == eager.last_metrics["psnr"]


def test_the_default_budget_is_a_quarter_of_the_memory():
    assert image_budget_bytes(1.5) == 1.5 * 2**20
    with open("/proc/meminfo") as f:
        total_kb = int(f.readline().split()[1])
    assert abs(image_budget_bytes(None) - total_kb * 1024 / 4) < 0.01 * total_kb * 1024
