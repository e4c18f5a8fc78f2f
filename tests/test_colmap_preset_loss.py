"""The COLMAP preset's loss: the photometric terms plus MCMC's opacity regulariser, so that Gaussians
no training view needs fade and are pruned instead of staying on as floaters in longer runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from conftest import REPO
from splattrain.console import Console
from splattrain.data.colmap_model import read_model
from splattrain.data.colmap_write import write_model
from splattrain.engine import DefaultTrainer, load_config
from splattrain.strategy.build import build_strategy
from splattrain.view_opt import SE3PoseRefinement, ViewCorrections
from test_colmap import make_colmap

PRESET = REPO / "configs" / "colmap.yaml"
#: A tight cluster of sparse points far below the cameras' ring: no training view sees it.
HIDDEN = np.array([[0.0, 0.0, -30.0], [0.05, 0.0, -30.0], [0.0, 0.05, -30.0], [0.05, 0.05, -30.0]])


def test_the_preset_adds_the_opacity_regulariser_to_the_photometric_loss():
    cfg = load_config(PRESET, ["data.path=x"])
    terms = [(t["type"], t["weight"]) for t in cfg.loss.terms]
    assert terms == [("l1", 0.8), ("dssim", 0.2), ("opacity_reg", 0.01)]


def _scene(root: Path) -> Path:
    make_colmap(root, n=6)
    model = read_model(root / "sparse" / "0")
    write_model(root / "sparse" / "0", list(model.cameras.values()), model.images, np.concatenate([model.points, HIDDEN]),
                np.concatenate([model.colors, np.full((4, 3), 128, dtype=np.uint8)]))
    return root


def _hidden_opacities(tmp_path: Path, scene: Path, name: str, extra: list[str]) -> tuple[torch.Tensor, int]:
    overrides = [f"data.path={scene}", f"output_dir={tmp_path / name}", "data.downscale=1", "data.test_every=0",
                 "trainer.max_steps=400", "trainer.val_interval=0", "model.sh_degree=0", "writers=[]",
                 "metrics.lpips=false", *extra]
    trainer = DefaultTrainer(load_config(PRESET, overrides), console=Console(quiet=True))
    transform = torch.as_tensor(trainer.data.world_transform, dtype=torch.float32)
    hidden = torch.as_tensor(HIDDEN, dtype=torch.float32) @ transform[:3, :3].T + transform[:3, 3]
    start = trainer.model.num_gaussians
    trainer.train()
    near = torch.cdist(trainer.model.means.detach(), hidden).min(dim=1).values < 1e-3
    return trainer.model.opacities.detach()[near], start


def test_gaussians_no_view_sees_fade_and_are_pruned_under_the_preset_but_not_without_the_term(tmp_path):
    scene = _scene(tmp_path / "scene")
    kept, start = _hidden_opacities(tmp_path, scene, "plain", ["loss.terms=[{type: l1, weight: 0.8}, {type: dssim, weight: 0.2}]"])
    assert start == 6  # the two points the views see and the hidden four
    assert kept.numel() == 4  # without the term nothing moves them: no gradient reaches them
    torch.testing.assert_close(kept, torch.full((4,), kept[0].item()))
    gone, _ = _hidden_opacities(tmp_path, scene, "preset", [])
    assert gone.numel() == 0  # faded below the pruning threshold and removed


def test_a_strategy_whose_own_terms_the_presets_list_leaves_out_is_warned_about(tmp_path):
    scene = _scene(tmp_path / "scene")
    warnings: list[str] = []

    class Recording(Console):
        def warning(self, message: str, once=None) -> None:
            warnings.append(message)

    overrides = [f"data.path={scene}", f"output_dir={tmp_path / 'run'}", "data.downscale=1", "data.test_every=0",
                 "trainer.max_steps=10", "writers=[]", "metrics.lpips=false",
                 "strategy={type: mcmc, max_gaussians: 100, refine_start_iter: 2, refine_stop_iter: 8, refine_every: 2}"]
    trainer = DefaultTrainer(load_config(PRESET, overrides), console=Recording(quiet=True))
    assert [name for name, _ in trainer.loss.terms] == ["l1", "dssim", "opacity_reg"]  # exactly the listed terms
    assert [w for w in warnings if "leaves out" in w] == [
        "loss.terms leaves out the strategy's own term {type: scale_reg, weight: 0.01}: this run goes without it "
        "(add it to loss.terms to use it)"]


def test_the_headers_recipe_gives_the_3dgs_30k_schedule_and_loss():
    header = PRESET.read_text().split("The 3DGS 30k schedule exactly:")[1].split("\nname:")[0]
    overrides = header.replace("#", " ").replace("\\", " ").split()
    cfg = load_config(PRESET, ["data.path=x", *overrides])
    strategy = build_strategy(cfg.strategy)
    assert cfg.trainer.max_steps == 30000 and cfg.model.sh_degree_interval == 1000
    assert (strategy.refine_start_iter, strategy.refine_stop_iter, strategy.reset_every) == (500, 15000, 3000)
    assert cfg.loss.terms is None  # L1 and D-SSIM alone, as 3DGS
    assert ViewCorrections({"type": "none"}, cfg.pose_opt, 3, torch.device("cpu")).pose is None  # given poses


def test_the_preset_refines_poses_from_step_2000_to_7000_with_an_l1_weight_and_type_none_turns_it_off():
    """The preset learns pose corrections once densification is over, keeping poses the images pull on
    less than ``l1`` as given; ``pose_opt.type=none`` alone turns that off."""
    pose = dict(load_config(PRESET, ["data.path=x"]).pose_opt)
    assert pose == {"type": "se3", "lr": 1.0e-4, "lr_final": 1.0e-5, "l1": 0.3, "start_step": 2000, "stop_step": 7000}
    built = ViewCorrections({"type": "none"}, pose, 3, torch.device("cpu"))
    assert isinstance(built.pose, SE3PoseRefinement) and built.pose.l1 == 0.3
    assert not built.pose.started(2000, 7000) and built.pose.active(2001, 7000) and not built.pose.active(7001, 28000)
    off = load_config(PRESET, ["data.path=x", "pose_opt.type=none"]).pose_opt
    assert ViewCorrections({"type": "none"}, off, 3, torch.device("cpu")).pose is None
