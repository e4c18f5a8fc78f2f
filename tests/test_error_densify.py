"""examples/error_densify.py: error-driven densification from a hook, through the trainer's row
calls. It scores the Gaussians by the error they cover, grows the run, evaluates as it trained, and
resumes bit for bit."""

from __future__ import annotations

import json

import pytest
import torch

from cli_check import run_cli
from conftest import REPO
from resume_check import assert_same, assert_same_run, single_thread, straight_and_resumed  # noqa: F401
from splattrain.cameras import Camera
from splattrain.config.imports import import_user_modules
from splattrain.errors import ConfigError
from splattrain.model.gaussians import GaussianModel
from splattrain.render import TorchRenderer

EXAMPLE = REPO / "examples" / "error_densify.py"
HOOK = "custom_hooks: [{type: ErrorDensifyHook, every: 4, fraction: 0.05}]"


def example():
    return import_user_modules([str(EXAMPLE)])[0]


def test_scores_are_the_error_a_gaussian_paints():
    """Two opaque Gaussians side by side: the error sits under the left one only."""
    error_densify = example()
    means = torch.tensor([[-0.5, 0.0, 0.0], [0.5, 0.0, 0.0], [0.0, 5.0, 0.0]])  # the third is out of view
    params = {
        "means": means, "scales": torch.full((3, 3), -2.0), "quats": torch.tensor([[1.0, 0, 0, 0]]).repeat(3, 1),
        "opacities": torch.full((3,), 4.0), "sh0": torch.zeros(3, 1, 3), "shN": torch.zeros(3, 0, 3),
    }
    model = GaussianModel({k: torch.nn.Parameter(v) for k, v in params.items()}, 0)
    viewmat = torch.eye(4)
    viewmat[2, 3] = 3.0
    camera = Camera(viewmat=viewmat, K=torch.tensor([[40.0, 0, 20], [0, 40.0, 20], [0, 0, 1]]), width=40, height=40)
    error = torch.zeros(40, 40)
    error[:, :20] = 0.5  # the left half of the image
    scores = error_densify.error_scores(model, TorchRenderer(), [(camera, error)], min_pixels=1.0)
    assert scores[0] == pytest.approx(0.5, abs=0.02) and scores[1] < 0.02 and scores[2] == 0.0
    assert model.params["sh0"].grad is None  # the model itself is left alone
    with pytest.raises(ConfigError, match="fraction"):
        error_densify.ErrorDensifyHook(fraction=0.0)


def test_error_densify_grows_evaluates_as_trained_and_resumes_bit_identically(tmp_path):
    straight, resumed = straight_and_resumed(tmp_path, extra=f"imports: [{EXAMPLE}]\n{HOOK}",
                                             overrides=["strategy.refine_start_iter=1000"])  # the hook alone grows
    hook = next(h for h in straight.hooks.hooks if type(h).__name__ == "ErrorDensifyHook")
    assert [entry[0] for entry in hook.grown] == [4, 8]  # not at 12, the last step
    assert straight.model.num_gaussians == 300 + sum(cloned + split for _, cloned, split in hook.grown)
    assert straight.model.num_gaussians > 300
    for name, optimizer in straight.optimizers.items():  # the optimizers follow the grown rows
        param = optimizer.param_groups[0]["params"][0]
        assert param is straight.model.params[name] and optimizer.state[param]["exp_avg"].shape == param.shape
    assert_same_run(straight, resumed, hooks=["ErrorDensifyHook"])
    assert_same(straight.strategy_state, resumed.strategy_state, "strategy_state")

    run = tmp_path / "straight"
    result = run_cli("eval", str(run), "--import", str(EXAMPLE))
    assert result.returncode == 0, result.stdout + result.stderr
    metrics = json.loads(next((run / "eval").glob("step_*/metrics.json")).read_text())
    assert metrics["step"] == 12
    assert metrics["psnr"] == pytest.approx(json.loads((run / "results.json").read_text())["psnr"], abs=1e-4)


def test_the_example_steers_through_the_trainer_protocol_only():
    from test_protocol import protocol_members, trainer_uses

    uses = trainer_uses(EXAMPLE)
    assert {"clone_gaussians", "split_gaussians"} <= {use.split(" ")[1] for use in uses["read"]}
    assert [use for use in uses["read"] if use.split(" ")[1] not in protocol_members()] == []
    assert uses["assigned"] == []
