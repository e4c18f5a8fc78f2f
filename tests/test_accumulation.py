"""Views per step and gradient accumulation: same update and densification statistics as one batch."""

from __future__ import annotations

import pytest
import torch

from resume_check import assert_same_run, make_trainer, single_thread, straight_and_resumed  # noqa: F401
from splattrain.errors import ConfigError
from splattrain.hooks import Hook
from splattrain.losses import photometric_loss

NO_REFINE = ["strategy.refine_start_iter=1000"]


def views(batch_size: int, accumulate: int):
    return [f"trainer.batch_size={batch_size}", f"optim.accumulate_steps={accumulate}"]


class GradsAfterBackward(Hook):
    """Keeps a copy of every parameter's gradient as the optimizer will see it."""

    def after_backward(self, trainer, step, outputs):
        self.grads = {name: p.grad.clone() for name, p in trainer.model.params.items()}
        self.losses = {name: value.item() for name, value in outputs["losses"].items()}


def test_accumulated_micro_batches_equal_one_step_on_the_concatenated_batch(tmp_path):
    # densification first: the splits then sample around the same parameters in both runs, so the
    # only difference left is Adam's +-lr on rows whose gradient is rounding noise
    refine = ["strategy.refine_start_iter=0", "strategy.refine_every=1", "strategy.grow_grad2d=0.0005",
              "optim.densify_after_step=false"]
    seen = {"accumulated": GradsAfterBackward(), "concatenated": GradsAfterBackward()}
    accumulated = make_trainer(tmp_path, "a", overrides=views(2, 2) + refine, hooks=[seen["accumulated"]])
    concatenated = make_trainer(tmp_path, "b", overrides=views(4, 1) + refine, hooks=[seen["concatenated"]])
    rng = torch.get_rng_state()  # splits draw from the global generator: give both runs the same draws
    a = accumulated.train_step(1)
    torch.set_rng_state(rng)
    b = concatenated.train_step(1)
    assert a["batch"]["image_id"].tolist() == b["batch"]["image_id"].tolist()
    assert seen["accumulated"].losses == pytest.approx(seen["concatenated"].losses, rel=1e-6)
    # rounding noise: 1e-6 of the step's largest gradient (the quats' gradients are all noise here)
    noise = 1e-6 * max(float(grad.abs().max()) for grad in seen["concatenated"].grads.values())
    for name, grad in seen["concatenated"].grads.items():
        torch.testing.assert_close(seen["accumulated"].grads[name], grad, rtol=1e-4, atol=noise)
    # the same Gaussians were cloned and split (densification ran after this step's statistics)
    assert accumulated.model.num_gaussians == concatenated.model.num_gaussians > 300
    for name, value in concatenated.model.params.items():
        # Adam's first update is +-lr per element: rows whose gradient is rounding noise may differ by 2 lr
        lr = concatenated.optimizers[name].param_groups[0]["lr"]
        torch.testing.assert_close(accumulated.model.params[name], value, rtol=0, atol=2.0001 * lr)


@pytest.mark.parametrize("batch_size, accumulate", [(2, 1), (1, 2)])
def test_densification_statistics_match_one_view_at_a_time(tmp_path, batch_size, accumulate):
    trainer = make_trainer(tmp_path, "run", overrides=views(batch_size, accumulate) + NO_REFINE)
    reference = make_trainer(tmp_path, "ref", overrides=views(2, 1) + NO_REFINE)  # same seed: same views, model
    trainer.train_step(1)

    # Each of the step's two views alone, as a one-view step sees it.
    batch, model, state = reference.data.next_train(1), reference.model, reference.strategy_state
    for index, camera in enumerate(batch["camera"]):
        render = reference.renderer.render(model, [camera], 0, batch["background"])
        reference.strategy.step_pre_backward(model.params, reference.optimizers, state, 1, render.info)
        photometric_loss(render.rgb, batch["image"][index : index + 1])["loss"].backward()
        reference.strategy.accumulate(model.params, state, 1, render.info)
        for optimizer in reference.optimizers.values():
            optimizer.zero_grad()

    assert state["count"].sum() > 0
    torch.testing.assert_close(trainer.strategy_state["count"], state["count"])
    torch.testing.assert_close(trainer.strategy_state["grad2d"], state["grad2d"], rtol=1e-5, atol=1e-9)


def test_batch_size_needs_images_of_one_size():
    from splattrain.cameras import Camera
    from splattrain.engine.batching import views_per_step

    cams = [Camera(viewmat=torch.eye(4), K=torch.eye(3), width=w, height=8) for w in (8, 9)]
    assert views_per_step(1, 3, cams) == 3
    with pytest.raises(ConfigError, match="one size"):
        views_per_step(2, 1, cams)
    with pytest.raises(ConfigError, match=">= 1"):
        views_per_step(0, 1, cams[:1])


def test_resume_with_views_per_step_and_schedules_matches_a_straight_run(tmp_path):
    extra = (
        "optim:\n  schedules:\n    opacities: {type: one-cycle, momentum: [0.85, 0.95]}\n"
        "    scales: {type: cosine, warmup_steps: 8}\n"
    )
    straight, resumed = straight_and_resumed(tmp_path, extra=extra, overrides=views(2, 2))
    assert straight.optimizers["opacities"].param_groups[0]["betas"][0] != 0.9  # beta1 is scheduled
    assert_same_run(straight, resumed)
