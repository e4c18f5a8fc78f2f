"""benchmarks/bench_gpu_trainers.py on the CPU: its arguments, the message when gsplat's trainer
is missing, the command lines of both trainers, and the frame change that scores gsplat's scene.
(The measurement itself needs a CUDA device and gsplat's example trainer: docs/gpu.md.)"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import DEMO, needs_shared
from lego_views import LEGO
from splattrain.config.schema import DataConfig
from splattrain.console import Console
from splattrain.data.loading import load_scene
from splattrain.synthetic.demo_variants import write_colmap_project
from splattrain.engine import DefaultTrainer, load_config

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(REPO / "benchmarks"))  # its module gsplat_project.py
    spec = importlib.util.spec_from_file_location("bench_gpu_trainers", REPO / "benchmarks" / "bench_gpu_trainers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    return write_colmap_project(tmp_path_factory.mktemp("scene") / "project", size=24, n_views=8)


def fake_examples(root: Path, with_reader: bool = True) -> Path:
    (root / "datasets").mkdir(parents=True)
    (root / "simple_trainer.py").write_text("")
    if with_reader:
        (root / "datasets" / "colmap.py").write_text("")
    return root


def test_missing_trainer_says_how_to_get_it(bench, scene, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GSPLAT_EXAMPLES", raising=False)
    assert bench.main(["--scene", str(scene)]) == 2
    said = capsys.readouterr().err
    assert "no --gsplat-examples DIR was given" in said
    assert "examples/simple_trainer.py in gsplat's GitHub repository" in said
    assert "git clone --depth 1 --branch v" in said and "examples/requirements.txt" in said

    assert bench.main(["--scene", str(scene), "--gsplat-examples", str(tmp_path / "nowhere")]) == 2
    assert f"{tmp_path / 'nowhere' / 'simple_trainer.py'} does not exist" in capsys.readouterr().err

    partial = fake_examples(tmp_path / "partial", with_reader=False)
    assert bench.main(["--scene", str(scene), "--gsplat-examples", str(partial), "--dry-run"]) == 2
    assert "datasets/colmap.py (its COLMAP reader) does not exist" in capsys.readouterr().err


def test_the_environment_variable_names_the_examples(bench, scene, tmp_path, capsys, monkeypatch):
    examples = fake_examples(tmp_path / "examples")
    monkeypatch.setenv("GSPLAT_EXAMPLES", str(examples))
    assert bench.main(["--scene", str(scene), "--dry-run", "--strategies", "default"]) == 0
    assert f"gsplat default: {examples / 'simple_trainer.py'} default" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--steps", "50"], "--steps must be at least 100"),
    (["--cap-max", "0"], "--cap-max must be positive"),
    (["--strategies", "budget"], "invalid choice: 'budget'"),
    (["--only", "both"], "invalid choice: 'both'"),
    (["--max-steps", "10"], "unrecognized arguments: --max-steps 10"),
])
def test_bad_arguments_are_refused(bench, scene, argv, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        bench.parse_args(["--scene", str(scene), *argv])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_a_folder_without_a_sparse_model_is_refused(bench, tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--scene", str(tmp_path)])
    assert "not a COLMAP scene (no sparse/ folder)" in capsys.readouterr().err


def test_both_trainers_get_the_same_scene_steps_and_schedule(bench, scene, tmp_path, capsys):
    examples = fake_examples(tmp_path / "examples")
    steps = 2000
    assert bench.main(["--scene", str(scene), "--gsplat-examples", str(examples), "--steps", str(steps),
                       "--dry-run", "metrics.lpips=false"]) == 0
    out = capsys.readouterr().out
    schedule = bench.matched_schedule(scene, steps)
    preset = load_config(REPO / "configs" / "colmap.yaml", [f"data.path={scene}", "data.downscale=1",
                                                             f"trainer.max_steps={steps}"])
    # the preset's scaled schedule: 7000-step settings times 2000/7000
    assert schedule == {"refine_start_iter": 143, "refine_stop_iter": 1143, "refine_every": 100,
                        "reset_every": 2000, "sh_degree_interval": 0, "opacity_reg": 0.01}
    assert schedule["refine_start_iter"] == preset.strategy.refine_start_iter
    for strategy in ("default", "mcmc"):
        command = bench.gsplat_command(examples / "simple_trainer.py", strategy, scene, steps, bench.OUT / f"gsplat_{strategy}",
                                       schedule, 1_000_000)
        flags = dict(zip(command[3::2], command[4::2]))
        assert command[2] == strategy
        assert flags["--data_dir"] == str(scene) and flags["--data_factor"] == "1" and flags["--test_every"] == "8"
        assert flags["--max_steps"] == flags["--eval_steps"] == flags["--save_steps"] == str(steps)
        assert "--disable_viewer" in command and "--disable_video" in command
        assert flags["--strategy.refine-start-iter"] == "143" and flags["--strategy.refine-stop-iter"] == "1143"
        assert flags["--sh_degree_interval"] == "1"  # gsplat divides by it: 1 is its "from the start"
        assert ("--strategy.reset-every" in flags) == (strategy == "default")
        assert flags.get("--opacity_reg") == ("0.01" if strategy == "default" else None)  # gsplat's mcmc has its own
        assert ("--strategy.cap-max" in flags) == (strategy == "mcmc")
        assert f"gsplat {strategy}: {' '.join(command[1:])}" in out

        overrides = bench.splattrain_overrides(scene, steps, strategy, tmp_path / "out", schedule, 300_000)
        cfg = load_config(REPO / "configs" / "colmap.yaml", overrides)
        assert cfg.renderer.type == "gsplat" and cfg.data.downscale == 1 and cfg.trainer.max_steps == steps
        assert cfg.model.sh_degree_interval == 0
        assert cfg.strategy.type == strategy
        assert cfg.strategy.refine_start_iter == 143 and cfg.strategy.refine_stop_iter == 1143
        if strategy == "mcmc":
            assert cfg.strategy.max_gaussians == 300_000  # the preset's reset_every stays, ignored by mcmc
            assert cfg.model.init.opacity == 0.5 and cfg.model.init.scale_factor == 0.1
            assert cfg.loss.terms is None  # the photometric default plus MCMC's opacity and scale terms
        else:
            assert cfg.strategy.reset_every == 2000
            assert [t["type"] for t in cfg.loss.terms] == ["l1", "dssim", "opacity_reg"]


def test_gsplat_scenes_move_into_splattrain_frame(bench):
    generator = torch.Generator().manual_seed(0)
    n = 50
    world = torch.randn(n, 3, generator=generator, dtype=torch.float64)
    angle = 0.7
    turn = torch.tensor([[math.cos(angle), -math.sin(angle), 0.0], [math.sin(angle), math.cos(angle), 0.0],
                         [0.0, 0.0, 1.0]], dtype=torch.float64)
    gsplat_frame = torch.eye(4, dtype=torch.float64)
    gsplat_frame[:3, :3] = 0.5 * turn
    gsplat_frame[:3, 3] = torch.tensor([1.0, -2.0, 0.5])
    ours = torch.eye(4, dtype=torch.float64)
    ours[:3, :3] *= 2.0
    ours[:3, 3] = torch.tensor([0.0, 3.0, 0.0])
    params = {
        "means": (world @ gsplat_frame[:3, :3].T + gsplat_frame[:3, 3]).float(),
        "scales": torch.zeros(n, 3), "quats": torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(n, 1),
        "opacities": torch.zeros(n), "sh0": torch.zeros(n, 1, 3), "shN": torch.zeros(n, 15, 3),
    }
    moved = bench.into_splattrain_frame(params, gsplat_frame.tolist(), ours)
    expected = world @ ours[:3, :3].T + ours[:3, 3]
    assert torch.allclose(moved["means"].double(), expected, atol=1e-5)
    assert torch.allclose(moved["scales"], torch.full((n, 3), math.log(4.0)), atol=1e-6)  # 2 / 0.5
    # the turn is undone: each Gaussian's rotation is the inverse of gsplat's turn
    undo = torch.tensor([math.cos(-angle / 2), 0.0, 0.0, math.sin(-angle / 2)])
    assert torch.allclose(moved["quats"][0].abs(), undo.float().abs(), atol=1e-5)


PAPER = {"refine_start_iter": 500, "refine_stop_iter": 15000, "refine_every": 100, "reset_every": 3000,
         "sh_degree_interval": 1000, "opacity_reg": 0.0}


@pytest.mark.parametrize("where", ["demo", pytest.param("lego", marks=needs_shared(LEGO))])
def test_a_blender_scene_gets_its_preset_and_the_protocols_30000_steps(bench, where, tmp_path, capsys):
    scene = DEMO if where == "demo" else LEGO
    examples = fake_examples(tmp_path / "examples")
    assert bench.main(["--scene", str(scene), "--gsplat-examples", str(examples), "--dry-run",
                       "metrics.lpips=false"]) == 0
    out = capsys.readouterr().out
    assert bench.matched_schedule(scene, 30000) == PAPER
    assert f"schedule of both: {PAPER}" in out
    train_views = len(json.loads((scene / "transforms_train.json").read_text())["frames"])
    assert train_views == (100 if where == "lego" else 48)
    project = bench.OUT / "gsplat_project"
    for strategy in ("default", "mcmc"):
        assert f"splattrain {strategy}: splattrain fit --config configs/blender.yaml data.path={scene} " in out
        line = next(line for line in out.splitlines() if line.startswith(f"gsplat {strategy}: "))
        flags = dict(zip(line.split()[4::2], line.split()[5::2]))
        assert flags["--data_dir"] == str(project) and flags["--max_steps"] == "30000"
        assert flags["--test_every"] == str(train_views + 1)  # the one held-out view, image 0
        assert flags["--sh_degree_interval"] == "1000" and flags["--strategy.refine-stop-iter"] == "15000"
    assert not project.exists()  # a dry run writes nothing

    overrides = bench.splattrain_overrides(scene, 30000, "default", tmp_path / "out", PAPER, 300_000)
    cfg = load_config(bench.preset(scene), overrides)
    assert cfg.renderer.type == "gsplat" and cfg.data.downscale == 1 and cfg.trainer.max_steps == 30000
    assert list(cfg.data.background) == [1.0, 1.0, 1.0] and cfg.strategy.refine_start_iter == 500
    assert cfg.trainer.resolution.schedule is None  # full size from the first step, as gsplat's trainer


def test_a_blender_scene_becomes_the_colmap_project_gsplat_reads(bench, tmp_path):
    import gsplat_project

    cfg = load_config(REPO / "configs" / "blender.yaml", [f"data.path={DEMO}", "data.downscale=4",
                                                          "model.init.num_points=500"])
    blender = load_scene(cfg.data)[1]
    folder = tmp_path / "project"
    test_every = gsplat_project.write_project(cfg, folder)
    assert test_every == 1 + len(blender.train)
    # read back as a COLMAP scene, every test_every-th image from the first held out, as gsplat splits it
    colmap = load_scene(DataConfig(path=str(folder), type="colmap", normalize=False, test_every=test_every,
                                   downscale=1))[1]
    assert [f.name for f in colmap.test] == [f"000_held_out_{blender.test[0].name}"]
    assert [f.name for f in colmap.train] == sorted(f"train_{f.name}" for f in blender.train)
    ours = {f"train_{f.name}": f for f in blender.train}
    for frame in colmap.train:
        theirs = ours[frame.name]
        assert torch.allclose(frame.camera.viewmat, theirs.camera.viewmat, atol=1e-5)
        assert torch.allclose(frame.camera.K, theirs.camera.K)
        rgba = theirs.pixels().astype(np.float32)
        expected = np.round(rgba[..., :3] * rgba[..., 3:] / 255.0)
        assert np.array_equal(frame.pixels(), expected.astype(np.uint8))  # over black, as gsplat renders
    with tempfile.TemporaryDirectory() as tmp:
        trainer = DefaultTrainer(load_config(REPO / "configs" / "blender.yaml", [
            f"data.path={DEMO}", "data.downscale=4", "model.init.num_points=500", f"output_dir={tmp}"]),
            console=Console(quiet=True))
    trainer.data.close()
    assert np.allclose(colmap.points, trainer.model.means.detach().numpy(), atol=1e-6)  # the same start
