"""Pruning by each Gaussian's share of the training images: the score (compositing weights summed
over views) on the compiled and PyTorch renderers, and ContributionPruneHook's schedule, choice,
scaling with the run, resume and refusals."""

from __future__ import annotations

import math

import pytest
import torch

from splattrain.cameras import Camera
from splattrain.errors import ConfigError
from splattrain.hooks import ContributionPruneHook, Hook, Priority
from splattrain.model.gaussians import GaussianModel
from splattrain.render import TorchRenderer
from splattrain.render.contribution import blending_weights
from splattrain.render.cpu_renderer import CpuRenderer
from resume_check import assert_same_run, make_trainer, single_thread, straight_and_resumed  # noqa: F401
from test_rasterizer import make_cameras


def _cameras(n: int = 3, width: int = 40, height: int = 30):
    viewmats, Ks = make_cameras(n, width, height)
    return [Camera(viewmat=v, K=k, width=width, height=height) for v, k in zip(viewmats, Ks)]


@pytest.mark.parametrize("renderer", [CpuRenderer(), TorchRenderer()], ids=["cpu", "torch"])
def test_the_weights_add_up_to_the_rendered_opacity(renderer):
    """Each pixel's weights sum to its opacity 1 - T, so the scores sum to the views' opacities."""
    model = GaussianModel.random(400, torch.zeros(3), 0.8, 1, opacity=0.4, generator=torch.Generator().manual_seed(3))
    cameras = _cameras()
    scores = blending_weights(model, renderer, cameras)
    with torch.no_grad():
        opacity = sum(renderer.render(model, [c], 1, torch.zeros(3), depth=False).alpha.sum() for c in cameras)
    assert scores.shape == (400,) and (scores >= 0).all()
    assert (scores > 0).float().mean() > 0.5
    assert float(scores.sum()) == pytest.approx(float(opacity), rel=1e-4)


def test_the_compiled_and_pytorch_renderers_agree():
    model = GaussianModel.random(300, torch.zeros(3), 0.8, 2, opacity=0.5, generator=torch.Generator().manual_seed(4))
    cameras = _cameras(2)
    ours, reference = blending_weights(model, CpuRenderer(), cameras), blending_weights(model, TorchRenderer(), cameras)
    torch.testing.assert_close(ours, reference, rtol=1e-3, atol=1e-3)


def _on_axis(camera: Camera, distances, scales) -> GaussianModel:
    """Opaque round Gaussians on the camera's axis at ``distances`` (negative: behind it)."""
    rotation, translation = camera.viewmat[:3, :3], camera.viewmat[:3, 3]
    centre, forward = -rotation.T @ translation, rotation[2]  # forward: the camera's z axis
    n = len(distances)
    model = GaussianModel.random(n, torch.zeros(3), 1.0, 0, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        model.params["means"].copy_(torch.stack([centre + d * forward for d in distances]))
        model.params["scales"].copy_(torch.tensor(scales).log()[:, None].expand(n, 3))
        model.params["quats"].copy_(torch.tensor([1.0, 0.0, 0.0, 0.0]).expand(n, 4))
        model.params["opacities"].fill_(torch.logit(torch.tensor(0.995)))
    return model


def test_a_hidden_gaussian_scores_little_and_an_unseen_one_nothing():
    """A large opaque Gaussian in front, a small one right behind it, one behind the camera."""
    camera = _cameras(1)[0]
    model = _on_axis(camera, [3.0, 5.0, -2.0], [0.5, 0.05, 0.5])
    before = {name: value.detach().clone() for name, value in model.params.items()}
    front, hidden, unseen = blending_weights(model, CpuRenderer(), [camera]).tolist()
    (alone,) = blending_weights(_on_axis(camera, [5.0], [0.05]), CpuRenderer(), [camera]).tolist()
    assert front > 50.0  # about the pixels it covers
    assert alone > 1.0 and 0.0 < hidden < 0.05 * alone
    assert unseen == 0.0
    for name, value in model.params.items():  # the model is left as it was, without gradients
        assert torch.equal(value.detach(), before[name]) and value.grad is None and value.requires_grad, name


class ScoreBeforePrune(Hook):
    """Scores the Gaussians at ``step`` before the prune hook acts, and records the rows it keeps."""

    priority = Priority.ABOVE_NORMAL

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step, self.scores, self.sources = step, None, None

    def before_train(self, trainer):
        trainer.on_gaussians_moved(self.moved)

    def moved(self, sources, params):
        if self.scores is not None and self.sources is None:
            self.sources = sources

    def after_train_iter(self, trainer, step, batch, outputs):
        if step == self.step:
            self.scores = blending_weights(trainer.model, trainer.renderer, [f.camera for f in trainer.data.train_frames])


def test_the_hook_removes_the_lowest_share_at_its_step(tmp_path):
    probe = ScoreBeforePrune(7)
    trainer = make_trainer(tmp_path, "run", hooks=[probe],
                           extra="custom_hooks:\n  - {type: ContributionPruneHook, steps: [7], fraction: 0.3}\n")
    trainer.train()
    count = len(probe.scores)
    removed = math.floor(0.3 * count)
    assert probe.sources is not None and len(probe.sources) == count - removed
    kept = torch.zeros(count, dtype=torch.bool)
    kept[probe.sources] = True
    assert probe.scores[~kept].max() <= probe.scores[kept].min()
    hook = next(h for h in trainer.hooks.hooks if isinstance(h, ContributionPruneHook))
    assert hook.pruned == [(7, removed, count - removed)]


def test_without_steps_it_prunes_when_densification_ends_scaled_with_the_run(tmp_path):
    """``steps: null`` takes the strategy's refine_stop_iter (scaled); listed steps scale too."""
    extra = "strategy:\n  refine_stop_iter: 20\ncustom_hooks:\n  - {type: ContributionPruneHook}\n"
    trainer = make_trainer(tmp_path, "a", extra=extra, overrides=["trainer.schedule_steps=24"])
    trainer.train()
    hook = next(h for h in trainer.hooks.hooks if isinstance(h, ContributionPruneHook))
    assert [entry[0] for entry in hook.pruned] == [10]
    extra = "custom_hooks:\n  - {type: ContributionPruneHook, steps: [8, 16], fraction: 0.2}\n"
    trainer = make_trainer(tmp_path, "b", extra=extra, overrides=["trainer.schedule_steps=24"])
    trainer.train()
    hook = next(h for h in trainer.hooks.hooks if isinstance(h, ContributionPruneHook))
    assert [entry[0] for entry in hook.pruned] == [4, 8]
    assert trainer.cfg.custom_hooks[0].steps == [4, 8]


def test_without_steps_it_reads_the_strategys_own_end_not_the_config(tmp_path):
    """A strategy section that leaves refine_stop_iter at its default (15000 of a 30000-step
    schedule) still says when densification ends: half way through the run."""
    extra = "strategy:\n  type: default\ncustom_hooks:\n  - {type: ContributionPruneHook}\n"
    trainer = make_trainer(tmp_path, "run", extra=extra, overrides=["trainer.schedule_steps=30000"])
    trainer.train()
    assert trainer.schedule.densification_ends == 6
    hook = next(h for h in trainer.hooks.hooks if isinstance(h, ContributionPruneHook))
    assert [entry[0] for entry in hook.pruned] == [6]


def test_max_views_scores_on_evenly_spaced_views(tmp_path):
    extra = "custom_hooks:\n  - {type: ContributionPruneHook, steps: [5], max_views: 3}\n"
    messages = []
    trainer = make_trainer(tmp_path, "run", extra=extra)
    trainer.console.info = lambda text, **_: messages.append(text)
    trainer.train()
    assert any("(3 views," in m and "step 5: pruned" in m for m in messages), messages


def test_a_resumed_run_after_the_prune_matches_a_straight_run(tmp_path):
    """The prune at the checkpoint's step runs before the checkpoint is written."""
    extra = "custom_hooks:\n  - {type: ContributionPruneHook, steps: [6], fraction: 0.4}\n"
    straight, resumed = straight_and_resumed(tmp_path, extra=extra)
    assert_same_run(straight, resumed, hooks=["ContributionPruneHook"])


@pytest.mark.parametrize("options, message", [
    ({"fraction": 0.0}, "fraction must be in (0, 1)"),
    ({"fraction": 1.0}, "fraction must be in (0, 1)"),
    ({"fraction": "half"}, "fraction must be in (0, 1)"),
    ({"steps": [0]}, "steps must be a list of steps >= 1"),
    ({"steps": "500"}, "steps must be a list of steps >= 1"),
    ({"steps": [2.5]}, "steps must be a list of steps >= 1"),
    ({"max_views": -1}, "max_views must be a count >= 0"),
])
def test_bad_options_are_refused(options, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ContributionPruneHook(**options)
