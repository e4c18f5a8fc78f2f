"""The worked examples of docs/extending.md: each plugin trains the demo scene end to end from its
config under configs/, does what it says, and is quoted exactly in the docs."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Sequence

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import DEMO, REPO
from resume_check import assert_same, assert_same_run, single_thread, straight_and_resumed  # noqa: F401
from splattrain import Hook, Strategy
from splattrain import SceneData
from splattrain.checkpoints.files import load_checkpoint_file
from splattrain.engine import load_config
from splattrain.config.imports import import_user_modules
from splattrain.console import Console
from splattrain.data.blender import load_blender
from splattrain.engine import DefaultTrainer
from splattrain.errors import ConfigError

#: The demo scene at 1/8 resolution (16x16), a few steps, the PyTorch renderer, no LPIPS.
TINY = [
    "data.downscale=8", "trainer.max_steps=6", "trainer.val_interval=0", "model.init.num_points=300",
    "model.sh_degree=1", "metrics.lpips=false", "renderer.type=torch", "writers=[{type: jsonl}]",
    "default_hooks.logger.interval=2", "default_hooks.checkpoint.interval=0",
]


class Recorder(Hook):
    """Keeps what the trainer handed to before_backward and after_backward."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: List[Dict[str, float]] = []
        self.outputs: List[Dict[str, Any]] = []

    def before_backward(self, trainer, step: int, losses: Dict[str, Any]) -> None:
        self.losses.append({name: float(value.detach()) for name, value in losses.items()})

    def after_backward(self, trainer, step: int, outputs: Dict[str, Any]) -> None:
        self.outputs.append(outputs)


def train(config: str, tmp_path: Path, monkeypatch, overrides: Sequence[str] = (), hooks: Sequence[Hook] = ()):
    """Train ``configs/<config>`` (from the repository root, as the docs say) with TINY settings."""
    monkeypatch.chdir(REPO)
    cfg = load_config(REPO / "configs" / config, [*TINY, f"output_dir={tmp_path / 'run'}", *overrides])
    trainer = DefaultTrainer(cfg, console=Console(quiet=True), config_dir=REPO / "configs")
    for hook in hooks:
        trainer.register_hook(hook)
    trainer.train()
    return trainer


def example(name: str) -> ModuleType:
    """The example module ``examples/<name>.py``, imported as ``imports:`` does."""
    return import_user_modules([str(REPO / "examples" / f"{name}.py")])[0]


def logged(run_dir: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# -- loss term ---------------------------------------------------------------------------------
def test_loss_term_example_is_trained_weighted_and_logged(tmp_path, monkeypatch):
    recorder = Recorder()
    trainer = train("demo_loss.yaml", tmp_path, monkeypatch, hooks=[recorder])
    assert [name for name, _ in trainer.loss.terms] == ["l1", "dssim", "depth_smoothness"]
    assert len(recorder.losses) == 6
    for losses in recorder.losses:
        assert losses["depth_smoothness"] > 0.0
        expected = 0.8 * losses["l1"] + 0.2 * losses["dssim"] + 0.05 * losses["depth_smoothness"]
        assert losses["loss"] == pytest.approx(expected, rel=1e-5)
    assert all(out["render"].depth is not None for out in recorder.outputs)  # needs_depth: training renders depth
    rows = [row for row in logged(tmp_path / "run") if "loss/depth_smoothness" in row]
    assert [row["step"] for row in rows] == [2, 4, 6]
    assert rows[-1]["loss/depth_smoothness"] == pytest.approx(recorder.losses[-1]["depth_smoothness"], rel=1e-5)


def test_depth_smoothness_spares_depth_edges_on_colour_edges():
    my_loss = example("my_loss")
    term = my_loss.EdgeAwareDepthSmoothness(edge_sharpness=10.0)
    image = torch.zeros(1, 8, 8, 3)
    image[:, :, 4:] = 1.0  # a colour edge between columns 3 and 4
    alpha = torch.ones(1, 8, 8, 1)
    aligned, crossing = torch.ones(1, 8, 8, 1), torch.ones(1, 8, 8, 1)
    aligned[:, :, 4:] = 2.0
    crossing[:, 4:] = 2.0  # a depth edge across the colour regions
    batch = {"image": image}

    def value(depth):
        return float(term(type("R", (), {"depth": depth, "alpha": alpha})(), batch, None))

    assert value(torch.full((1, 8, 8, 1), 3.0)) == 0.0
    assert 0.0 < value(aligned) < 1e-4 * value(crossing)
    with pytest.raises(ConfigError, match="edge_sharpness"):
        my_loss.EdgeAwareDepthSmoothness(edge_sharpness=-1.0)


# -- strategy ----------------------------------------------------------------------------------
TINY_PRUNE = [
    f"imports=[{REPO / 'examples' / 'tiny_prune.py'}]", "strategy.type=tiny_prune", "strategy.refine_start_iter=3",
    "strategy.refine_every=4", "strategy.reset_every=100", "strategy.refine_stop_iter=1500", "strategy.patience=2",
]


def test_minimal_strategy_example_has_only_the_three_calls():
    strategy = example("my_strategy").CloneTopStrategy
    overridden = sorted(name for name, value in vars(strategy).items()
                        if callable(value) and not name.startswith("_") and hasattr(Strategy, name))
    assert overridden == ["initialize_state", "step_post_backward", "step_pre_backward"]


def test_minimal_strategy_example_trains_and_densifies(tmp_path, monkeypatch):
    moved: List[int] = []

    class Listener(Hook):
        def before_train(self, trainer) -> None:
            trainer.on_gaussians_moved(lambda sources, params: moved.append(len(sources)))

    overrides = ["strategy.every=4", "strategy.stop=100", "trainer.max_steps=12"]
    trainer = train("demo_strategy.yaml", tmp_path, monkeypatch, overrides, [Listener()])
    assert type(trainer.strategy).__name__ == "CloneTopStrategy"
    assert moved and trainer.model.num_gaussians > moved[0] * 0.9  # three refinements cloned the top 5%
    assert len(trainer.strategy_state["grad"]) == trainer.model.num_gaussians


def test_minimal_strategy_example_resumes_bit_identically(tmp_path):
    straight, resumed = straight_and_resumed(
        tmp_path, extra=f"imports: [{REPO / 'examples' / 'my_strategy.py'}]",
        overrides=["strategy={type: clone_top, every: 4, stop: 100, fraction: 0.1}"],
    )
    assert straight.model.num_gaussians > 300  # it densified, before and after the resume point
    assert_same_run(straight, resumed)
    assert_same(straight.strategy_state, resumed.strategy_state, "strategy_state")


def test_strategy_example_prunes_gaussians_that_stay_tiny(tmp_path, monkeypatch):
    removed: List[int] = []

    class Listener(Hook):
        def before_train(self, trainer) -> None:
            trainer.on_gaussians_moved(lambda sources, params: removed.append(len(sources)))

    trainer = train("demo.yaml", tmp_path, monkeypatch, [*TINY_PRUNE, "trainer.max_steps=12"], [Listener()])
    state = trainer.strategy_state
    assert type(trainer.strategy).__name__ == "TinyPruneStrategy"
    assert state["tiny_pruned"] > 0
    assert len(state["tiny_count"]) == len(state["max_radius"]) == trainer.model.num_gaussians
    assert int(state["tiny_count"].max()) < 2  # whoever reached the patience is gone
    assert removed  # the removals were announced like the default strategy's


def test_tiny_prune_removes_exactly_the_gaussians_tiny_for_patience_refinements():
    my_strategy = example("tiny_prune")
    strategy = my_strategy.TinyPruneStrategy(tiny_radius=2.0, patience=2, prune_opa=0.0, refine_start_iter=0)
    params = {
        "means": torch.nn.Parameter(torch.arange(5.0)[:, None].repeat(1, 3)),
        "scales": torch.nn.Parameter(torch.full((5, 3), -5.0)),
        "quats": torch.nn.Parameter(torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(5, 1)),
        "opacities": torch.nn.Parameter(torch.zeros(5)),
    }
    optimizers = {name: torch.optim.Adam([p]) for name, p in params.items()}
    state = strategy.initialize_state()

    def refine(radii: List[int], step: int) -> None:
        means2d = torch.zeros(1, len(radii), 2, requires_grad=True)
        means2d.grad = torch.zeros_like(means2d)
        info = {"means2d": means2d, "radii": torch.tensor(radii, dtype=torch.int32)[None, :, None].repeat(1, 1, 2),
                "width": 16, "height": 16, "n_cameras": 1}
        strategy.accumulate(params, state, step, info)
        strategy.prune(params, optimizers, state, step)

    refine([2, 1, 3, 0, 2], 1)  # Gaussian 3 unseen, 2 large
    assert state["tiny_count"].tolist() == [1, 1, 0, 0, 1]
    refine([2, 4, 1, 0, 1], 2)
    assert state["tiny_pruned"] == 2 and params["means"][:, 0].tolist() == [1.0, 2.0, 3.0]  # 0 and 4 went
    assert state["tiny_count"].tolist() == [0, 1, 0] and optimizers["means"].param_groups[0]["params"][0] is params["means"]
    with pytest.raises(ConfigError, match="patience"):
        my_strategy.TinyPruneStrategy(patience=0)


def test_strategy_example_resumes_bit_identically(tmp_path):
    straight, resumed = straight_and_resumed(
        tmp_path, extra=f"imports: [{REPO / 'examples' / 'tiny_prune.py'}]",
        overrides=["strategy.type=tiny_prune", "strategy.patience=2", "strategy.reset_every=100",
                   "strategy.grow_grad2d=0.0002", "strategy.refine_start_iter=1", "strategy.refine_every=2"],
    )
    checkpoint = load_checkpoint_file(tmp_path / "straight" / "ckpt" / "step_000006.pt")
    assert int(checkpoint["strategy_state"]["tiny_count"].max()) == 1  # mid-way: the counts must survive
    assert straight.strategy_state["tiny_pruned"] > checkpoint["strategy_state"]["tiny_pruned"]
    assert_same_run(straight, resumed)
    assert_same(straight.strategy_state, resumed.strategy_state, "strategy_state")


# -- renderer ----------------------------------------------------------------------------------
def test_renderer_example_renders_at_its_factor_and_trains(tmp_path, monkeypatch):
    recorder = Recorder()
    trainer = train("demo_renderer.yaml", tmp_path, monkeypatch, ["data.downscale=4", "renderer.type=lowres"],
                    [recorder])
    assert type(trainer.renderer).__name__ == "LowResRenderer" and trainer.renderer.factor == 2
    assert type(trainer.renderer.inner).__name__ == "TorchRenderer"
    for outputs in recorder.outputs:
        render = outputs["render"]
        assert render.rgb.shape == (1, 32, 32, 3) and render.alpha.shape == (1, 32, 32, 1)
        assert (render.info["width"], render.info["height"]) == (16, 16)
        assert render.info["means2d"].grad is not None  # densification sees the low-resolution gradients


def test_lowres_renderer_factor_one_is_its_backend_and_options_are_checked():
    my_renderer = example("my_renderer")
    from splattrain.cameras import Camera
    from splattrain.model.gaussians import GaussianModel
    from splattrain.render import TorchRenderer

    generator = torch.Generator().manual_seed(0)
    model = GaussianModel.random(200, torch.zeros(3), 0.5, 0, opacity=0.5, generator=generator)
    K = torch.tensor([[20.0, 0.0, 12.0], [0.0, 20.0, 12.0], [0.0, 0.0, 1.0]])
    viewmat = torch.eye(4)
    viewmat[2, 3] = 3.0
    camera = Camera(viewmat=viewmat, K=K, width=24, height=24)
    background = torch.ones(3)
    same = my_renderer.LowResRenderer(backend="torch", factor=1).render(model, [camera], 0, background)
    reference = TorchRenderer().render(model, [camera], 0, background)
    assert torch.equal(same.rgb, reference.rgb) and torch.equal(same.depth, reference.depth)
    half = my_renderer.LowResRenderer(backend="torch", factor=2).render(model, [camera], 0, background, depth=False)
    assert half.rgb.shape == (1, 24, 24, 3) and half.depth is None and half.info["width"] == 12
    assert not torch.equal(half.rgb, reference.rgb)
    with pytest.raises(ConfigError, match="factor"):
        my_renderer.LowResRenderer(factor=0)
    with pytest.raises(ConfigError, match="'torch'"):
        my_renderer.LowResRenderer(backend="torhc")
    with pytest.raises(ConfigError, match="another renderer"):
        my_renderer.LowResRenderer(backend="lowres")


# -- dataset -----------------------------------------------------------------------------------
def write_cameras_json(folder: Path) -> SceneData:
    """The demo scene as a cameras.json folder (written here, independently of the example's
    own converter); returns the blender scene it came from."""
    scene = load_blender(DEMO)
    (folder / "photos").mkdir(parents=True)
    frames = []
    for split, views in (("test", scene.test), ("train", scene.train)):
        for frame in views:
            Image.fromarray(frame.image).save(folder / "photos" / f"{frame.name}_{split}.png")
            frames.append({"image": f"photos/{frame.name}_{split}.png", "K": frame.camera.K.tolist(),
                           "world_to_camera": frame.camera.viewmat.tolist(), "split": split})
    (folder / "cameras.json").write_text(json.dumps({"frames": frames}))
    return scene


def test_dataset_example_is_detected_and_trains(tmp_path, monkeypatch):
    folder = tmp_path / "scene"
    scene = write_cameras_json(folder)
    trainer = train("demo_dataset.yaml", tmp_path, monkeypatch, [f"data.path={folder}", "data.type=auto"])
    assert trainer.data_type == "cameras_json"
    assert [f.name for f in trainer.data.train_frames] == [f"{f.name}_train" for f in scene.train]
    assert [f.name for f in trainer.data.test_frames] == [f"{f.name}_test" for f in scene.test]
    assert trainer.data.train_frames[0].image.shape == (16, 16, 4)
    assert trainer.data.world_transform[0, 0] != 1.0  # normalize_by_default took effect
    assert len(trainer.val_per_view) == 10 and trainer.last_metrics["psnr"] > 5.0


def test_dataset_reader_reads_what_the_blender_reader_reads(tmp_path, monkeypatch):
    my_dataset = example("my_dataset")
    from splattrain.config.schema import DataConfig
    from splattrain.data.loading import load_scene

    written = tmp_path / "mine"
    scene = write_cameras_json(written)
    converted = tmp_path / "converted"
    my_dataset.save(scene, converted)
    for folder in (written, converted):
        kind, loaded = load_scene(DataConfig(path=str(folder), normalize=False))
        assert kind == "cameras_json" and not loaded.extra["notes"][1:]
        for mine, theirs in zip(loaded.train + loaded.test, scene.train + scene.test):
            np.testing.assert_array_equal(mine.image, theirs.image)
            assert torch.equal(mine.camera.K, theirs.camera.K) and torch.equal(mine.camera.viewmat, theirs.camera.viewmat)
        assert (len(loaded.train), len(loaded.test)) == (48, 10)
    unmarked = json.loads((written / "cameras.json").read_text())
    for entry in unmarked["frames"]:
        del entry["split"]
    (written / "cameras.json").write_text(json.dumps(unmarked))
    _, loaded = load_scene(DataConfig(path=str(written), normalize=False, test_every=8))
    assert (len(loaded.train), len(loaded.test)) == (50, 8)  # every 8th frame from the first


# -- the docs quote the examples exactly ---------------------------------------------------------
@pytest.mark.parametrize("example", ["my_extensions.py", "my_writer.py", "my_loss.py", "my_strategy.py",
                                     "error_densify.py", "my_renderer.py", "my_dataset.py"])
def test_extending_docs_quote_the_examples_exactly(example):
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "extending.md").read_text(), re.S)
    assert (REPO / "examples" / example).read_text() in blocks


# -- the command line: one-line errors naming the key and the file, and `list` --------------------
PLUGIN_TYPOS = [
    ("strategy:\n  type: clone_top\n  fracton: 0.1\n", "strategy.fracton", "'fraction'"),
    ("loss:\n  terms:\n    - {type: l1}\n    - {type: depth_smoothness, edge_sharpnes: 5.0}\n",
     "loss.terms[1].edge_sharpnes", "'edge_sharpness'"),
    ("renderer:\n  type: lowres\n  factr: 2\n", "renderer.factr", "'factor'"),
    ("strategy:\n  type: default\n  grow_grad2: 0.001\n", "strategy.grow_grad2", "'grow_grad2d'"),
    ("loss:\n  terms:\n    - {type: depth, relativ: true}\n", "loss.terms[0].relativ", "'relative'"),
    ("renderer:\n  type: torch\n  tile_sise: 8\n", "renderer.tile_sise", "'tile_size'"),
]


@pytest.mark.parametrize("section, key, suggestion", PLUGIN_TYPOS, ids=lambda v: str(v).split("\n")[0][:20])
def test_plugin_option_typo_exits_2_naming_key_and_file(tmp_path, section, key, suggestion):
    from test_cli import assert_one_line_error, run_cli

    imports = ", ".join(str(REPO / "examples" / f"my_{name}.py") for name in ("loss", "strategy", "renderer"))
    config = tmp_path / "typo.yaml"
    config.write_text(f"name: typo\ndata:\n  path: {DEMO}\nimports: [{imports}]\n{section}")
    assert_one_line_error(run_cli("fit", "--config", str(config)), str(config), key, suggestion)
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("what, config, name", [
    ("losses", "demo_loss.yaml", "depth_smoothness"), ("strategies", "demo_strategy.yaml", "clone_top"),
    ("renderers", "demo_renderer.yaml", "lowres"), ("datasets", "demo_dataset.yaml", "cameras_json"),
])
def test_list_with_config_shows_the_plugins_of_its_imports(what, config, name):
    from test_cli import run_cli

    plain = run_cli("list", what)
    assert plain.returncode == 0 and name not in plain.stdout
    result = run_cli("list", what, "--config", f"configs/{config}")
    assert result.returncode == 0, result.stderr
    built_in = [n for n in re.findall(r"^\W (\w+)\s", plain.stdout, re.M) if n != "name"]  # the first column
    assert len(built_in) >= 2 and name in result.stdout and all(n in result.stdout for n in built_in)


def test_list_trainers_strategies_and_losses_show_the_built_ins():
    from test_cli import run_cli

    for what, names in [("trainers", ["DefaultTrainer"]), ("strategies", ["default", "mcmc"]),
                        ("losses", ["l1", "l2", "dssim", "opacity_reg", "scale_reg", "depth"])]:
        result = run_cli("list", what)
        assert result.returncode == 0 and all(re.search(rf"^\W {n}\s", result.stdout, re.M) for n in names), result.stdout


def test_readme_extending_example_is_a_valid_config(tmp_path, monkeypatch):
    readme = (REPO / "README.md").read_text()
    block = re.search(r"## Extending\n.*?```yaml\n(.*?)```", readme, re.S).group(1)
    config = tmp_path / "cfg.yaml"
    config.write_text(f"name: readme\ndata:\n  path: {DEMO}\n{block}")
    monkeypatch.chdir(REPO)
    cfg = load_config(config)
    assert cfg.strategy.type == "tiny_prune" and [t["type"] for t in cfg.loss.terms][-1] == "depth_smoothness"
    assert cfg.custom_hooks[0].type == "OpacityStatsHook"
