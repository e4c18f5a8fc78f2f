"""The minimal strategy (examples/my_strategy.py) on two ranks: its statistics are summed over the
ranks as it adds them, so both ranks clone the same Gaussians, and the run is the one rank x two
views run its statistics say it should be."""

from __future__ import annotations

import pytest
import torch

from cli_check import run_cli
from conftest import REPO
from dist_launch import gaussian_counts, gaussians, write_config
from splattrain.checkpoints.files import load_checkpoint_file

STRATEGY = [f"imports=[{REPO / 'examples' / 'my_strategy.py'}]",
            "strategy={type: clone_top, every: 10, stop: 30, fraction: 0.05}"]


@pytest.mark.slow
def test_minimal_strategy_makes_the_same_choices_on_two_ranks_as_on_one(tmp_path):
    config = write_config(tmp_path)
    one = run_cli("fit", "--config", str(config), "--quiet", f"output_dir={tmp_path / 'one'}", "trainer.batch_size=2",
                  *STRATEGY, timeout=600)
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-3000:]
    two = run_cli("fit", "--nproc", "2", "--config", str(config), "--quiet", f"output_dir={tmp_path / 'two'}",
                  *STRATEGY, timeout=600)
    assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-3000:]  # the replicas never diverged

    counts = gaussian_counts(tmp_path / "two")
    assert counts == gaussian_counts(tmp_path / "one") and counts[36] > counts[9]  # it cloned, alike
    # mid-way (8 steps after the refinement at 10) the statistics hold both ranks' views: the same
    # visibility counts as one rank rendering both views, and twice its gradients (each rank's loss
    # is of one view, the single rank's the mean of two)
    states = [load_checkpoint_file(tmp_path / run / "ckpt" / "step_000018.pt")["strategy_state"] for run in ("two", "one")]
    assert float(states[1]["seen"].sum()) > 0
    torch.testing.assert_close(states[0]["seen"], states[1]["seen"], atol=2, rtol=0)
    assert float((states[0]["seen"] != states[1]["seen"]).float().mean()) < 0.01
    torch.testing.assert_close(states[0]["grad"], 2 * states[1]["grad"], rtol=0.05, atol=1e-7)
    final = [gaussians(tmp_path / run / "ckpt" / "step_000036.pt") for run in ("two", "one")]
    for key in final[1]:  # the same Gaussians in the same rows: the same ones were cloned
        assert final[0][key].shape == final[1][key].shape, key
        assert float((final[0][key] - final[1][key]).abs().mean()) < 1e-4, key
