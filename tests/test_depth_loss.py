"""Depth maps beside a scene and the ``depth`` loss term."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import DEMO, tiny_config_text
from resume_check import assert_same_run, single_thread, straight_and_resumed  # noqa: F401
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.synthetic.demo_scene import depth_map
from splattrain.data.loading import load_scene
from splattrain.engine import DefaultTrainer
from splattrain.errors import DataError


@pytest.fixture(scope="module")
def demo_with_depths(tmp_path_factory) -> Path:
    """The demo scene with true depth maps of its training views in depths/<view>.npy (full size)."""
    root = tmp_path_factory.mktemp("demo_depth") / "demo"
    shutil.copytree(DEMO, root)
    text = tiny_config_text(root.parent).replace(str(DEMO), str(root)).replace("downscale: 4", "downscale: 1")
    cfg = load_config(_write(root.parent, text), check_plugins=False)
    _, scene = load_scene(cfg.data)
    (root / "depths").mkdir()
    for frame in scene.train:
        cam = frame.camera
        depth = depth_map(cam.viewmat.numpy(), cam.K.numpy(), cam.width, cam.height)
        np.save(root / "depths" / f"{frame.name}.npy", depth)
    return root


def _write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cfg.yaml"
    path.write_text(text)
    return path


def trainer_for(tmp_path: Path, data: Path, steps: int, terms: str) -> DefaultTrainer:
    text = tiny_config_text(tmp_path, steps=steps).replace(str(DEMO), str(data))
    text += f"renderer:\n  type: torch\nwriters: []\nloss:\n  terms: {terms}\n"
    return DefaultTrainer(load_config(_write(tmp_path, text)), console=Console(quiet=True))


def test_depth_maps_are_attached_resized_and_batched(demo_with_depths, tmp_path):
    trainer = trainer_for(tmp_path, demo_with_depths, 1, "[{type: l1}]")
    assert trainer.data.has_depths
    frame = trainer.data.train_frames[0]
    assert frame.depth.shape == frame.image.shape[:2] == (32, 32)  # 128 px maps, downscale 4
    assert frame.depth.max() > 1.0 and (frame.depth == 0).any()  # the scene and the sky
    batch = trainer.data.next_train(1)
    assert batch["depth"].shape == (1, 32, 32, 1) and batch["depth"].dtype == torch.float32


def test_depth_term_pulls_the_rendered_depth_towards_the_maps(demo_with_depths, tmp_path):
    def depth_error(terms: str, run: str) -> float:
        trainer = trainer_for(tmp_path / run, demo_with_depths, 120, terms)
        trainer.train()
        errors = []
        with torch.no_grad():
            for frame in trainer.data.train_frames[:8]:
                render = trainer.renderer.render(trainer.model, [frame.camera], 1, trainer.background)
                target = torch.from_numpy(frame.depth)[None, ..., None]
                valid = (target > 0) & (render.alpha > 0.5)
                errors.append(((render.depth - target).abs() * valid).sum() / valid.sum())
        return float(torch.stack(errors).mean())

    plain = depth_error("[{type: l1, weight: 0.8}, {type: dssim, weight: 0.2}]", "plain")
    supervised = depth_error("[{type: l1, weight: 0.8}, {type: dssim, weight: 0.2}, {type: depth, weight: 2.0}]", "depth")
    assert supervised < 0.75 * plain, (supervised, plain)  # 0.62 when written


def test_depth_term_without_maps_is_skipped_with_one_warning(tmp_path):
    text = tiny_config_text(tmp_path, steps=2) + "writers: []\nloss:\n  terms: [{type: l1}, {type: depth}]\n"
    warnings = []
    console = Console(quiet=True)
    console.warning = warnings.append  # type: ignore[method-assign]
    trainer = DefaultTrainer(load_config(_write(tmp_path, text)), console=console)
    assert [name for name, _ in trainer.loss.terms] == ["l1"]
    about_terms = [w for w in warnings if "loss term" in w]
    assert len(about_terms) == 1 and "loss term 'depth' is skipped" in about_terms[0] and "depths/" in about_terms[0]


def test_depth_folder_without_matching_views_is_refused(tmp_path):
    root = tmp_path / "demo"
    shutil.copytree(DEMO, root)
    (root / "depths").mkdir()
    np.save(root / "depths" / "unrelated.npy", np.ones((4, 4), np.float32))
    cfg = load_config(_write(tmp_path, tiny_config_text(tmp_path).replace(str(DEMO), str(root))))
    with pytest.raises(DataError, match=r"no <view>\.npy in .*depths"):
        load_scene(cfg.data)


@pytest.mark.parametrize(
    "terms",
    [
        "[{type: l2, weight: 0.7}, {type: dssim, weight: 0.3}]",
        "[{type: l1}, {type: opacity_reg, weight: 0.01}, {type: scale_reg, weight: 0.01}]",
        "[{type: l1, weight: 0.9}, {type: depth, weight: 0.5, relative: true}]",
    ],
    ids=["l2-dssim", "regularisers", "depth"],
)
def test_resume_is_exact_with_each_loss_configuration(demo_with_depths, tmp_path, terms):
    extra = f"loss:\n  terms: {terms}\n"
    overrides = [f"data.path={demo_with_depths}"]
    straight, resumed = straight_and_resumed(tmp_path, extra=extra, overrides=overrides)
    assert [name for name, _ in straight.loss.terms] == [t.split(",")[0].split(": ")[1] for t in terms[1:-1].split("}, ")]
    assert_same_run(straight, resumed)
