"""A renderer's lifecycle (setup with the run's scene, checkpointed state, the Gaussians it exports),
proved by examples/mip_splatting.py: Mip-Splatting's 3D smoothing filter trains, resumes exactly,
and ``eval``, ``export``, the run's own scene files and ``view`` all show what it scored."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
import pytest
import torch

from cli_check import assert_one_line_error, run_cli
from conftest import DEMO, REPO
from resume_check import assert_same, assert_same_run, make_trainer, single_thread, straight_and_resumed  # noqa: F401
from splattrain.cameras import Camera
from splattrain.checkpoints.files import load_checkpoint_file, save_checkpoint_file
from splattrain.commands.snapshot import load_snapshot
from splattrain.commands.view import load_viewed_scene
from splattrain.config.imports import import_user_modules
from splattrain.config.schema import DataConfig
from splattrain.console import Console
from splattrain.data.loading import load_scene
from splattrain.data.pipeline import DataPipeline
from splattrain.io.gaussians_file import read_gaussians_file_full
from splattrain.metrics import Evaluator, mean_metrics
from splattrain.model.gaussians import GaussianModel
from splattrain.registry import RENDERERS
from splattrain.render import Renderer, RenderScene, TorchRenderer

EXAMPLE = REPO / "examples" / "mip_splatting.py"
#: A filter wider than the paper's (sqrt 0.2) so that a few dozen steps at 32x32 show what it does.
FILTER_SCALE = 2.0


def mip() -> object:
    return import_user_modules([str(EXAMPLE)])[0]


def camera(z: float, focal: float, size: int = 24, x: float = 0.0) -> Camera:
    viewmat = torch.eye(4)
    viewmat[:3, 3] = torch.tensor([x, 0.0, z])
    K = torch.tensor([[focal, 0.0, size / 2], [0.0, focal, size / 2], [0.0, 0.0, 1.0]])
    return Camera(viewmat=viewmat, K=K, width=size, height=size)


def small_model(n: int = 200) -> GaussianModel:
    generator = torch.Generator().manual_seed(0)
    return GaussianModel.random(n, torch.zeros(3), 0.5, 0, opacity=0.5, generator=generator)


# -- the default lifecycle changes nothing -------------------------------------------------------
def test_built_in_renderers_keep_no_state_and_export_their_gaussians():
    model = small_model()
    for name in ("torch", "cpu", "gsplat"):
        cls = RENDERERS.get(name)
        assert not cls.needs_scene and not cls.folds_into_export()
    renderer = TorchRenderer()
    renderer.setup(RenderScene((camera(3.0, 20.0),), 1.0), model)
    renderer.load_state_dict({})
    assert renderer.state_dict() == {} and renderer.export_gaussians(model) is model


def test_a_plain_run_checkpoints_an_empty_renderer_state(tmp_path):
    trainer = make_trainer(tmp_path, "plain", steps=6)
    trainer.train()
    entry = load_checkpoint_file(tmp_path / "plain" / "ckpt" / "step_000006.pt")["renderer"]
    assert entry == {"type": "TorchRenderer", "state": {}, "folds_into_export": False}


# -- the filter ----------------------------------------------------------------------------------
def test_filter_is_the_finest_sampling_rate_of_the_cameras_that_see_each_gaussian():
    example = mip()
    means = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [30.0, 0.0, 0.0], [0.0, 0.0, -9.0]])
    model = GaussianModel.from_points(means, torch.rand(4, 3), 0)
    cameras = (camera(4.0, 20.0), camera(8.0, 60.0))  # both see the first two; none the others
    renderer = example.MipSplattingRenderer(backend="torch", filter_scale=0.5)
    renderer.setup(RenderScene(cameras, 1.0), model)
    rates = []
    for point in means[:2].tolist():
        rates.append(max(cam.K[0, 0].item() / (point[2] + cam.viewmat[2, 3].item()) for cam in cameras))
    rates += [min(rates)] * 2  # unseen: the lowest rate of the others
    expected = torch.tensor([(0.5 / rate) ** 2 for rate in rates])
    torch.testing.assert_close(renderer.filter, expected)
    renderer.gaussians_moved(torch.arange(4), model.params)
    assert renderer.state_dict() == {}  # stale until the next render


def test_filtered_render_is_a_plain_render_of_the_exported_gaussians():
    example = mip()
    model = small_model()
    cam = camera(3.0, 20.0)
    renderer = example.MipSplattingRenderer(backend="torch", rasterize_mode="antialiased")
    renderer.setup(RenderScene((cam,), 1.0), model)
    background = torch.ones(3)
    filtered = renderer.render(model, [cam], 0, background)
    exported = renderer.export_gaussians(model)
    plain = TorchRenderer(rasterize_mode="antialiased")
    torch.testing.assert_close(plain.render(exported, [cam], 0, background).rgb, filtered.rgb, atol=1e-5, rtol=0)
    assert (plain.render(model, [cam], 0, background).rgb - filtered.rgb).abs().max() > 1e-2
    filtered.rgb.sum().backward()
    assert model.params["scales"].grad.abs().sum() > 0 and model.params["opacities"].grad.abs().sum() > 0


# -- fit and resume ------------------------------------------------------------------------------
MIP = [f"renderer={{type: mip_splatting, backend: torch, filter_scale: {FILTER_SCALE}}}", "data.normalize=true"]


def test_mip_run_resumes_bit_identically_from_its_filter(tmp_path):
    extra = f"imports: [{EXAMPLE}]"
    straight, resumed = straight_and_resumed(tmp_path, extra=extra, overrides=MIP)
    checkpoint = load_checkpoint_file(tmp_path / "straight" / "ckpt" / "step_000006.pt")
    saved = checkpoint["renderer"]
    assert saved["type"] == "MipSplattingRenderer" and saved["folds_into_export"]
    # the step-6 filter is the one of the step-4 densification: not what the step-6 Gaussians give
    assert len(saved["state"]["filter"]) == len(checkpoint["gaussians"]["means"]) > 300
    assert not torch.equal(saved["state"]["filter"], straight.renderer.filter_variance(checkpoint["gaussians"]["means"]))
    assert_same_run(straight, resumed)
    assert_same(straight.renderer.state_dict(), resumed.renderer.state_dict(), "renderer")

    del checkpoint["renderer"]  # as written before renderers kept state: tolerated, not exact
    save_checkpoint_file(checkpoint, tmp_path / "old.pt")
    stateless = make_trainer(tmp_path, "stateless", extra=extra, overrides=MIP)
    stateless.train(resume=tmp_path / "old.pt")
    assert stateless.step == 12
    assert not torch.equal(stateless.model.params["means"], straight.model.params["means"])


def test_commands_set_the_renderer_up_with_the_normalised_training_cameras(tmp_path):
    trainer = make_trainer(tmp_path, "run", steps=6, extra=f"imports: [{EXAMPLE}]", overrides=MIP)
    trainer.train()
    renderer = load_snapshot(tmp_path / "run").renderer()
    for name in ("viewmats", "Ks", "sizes"):
        assert torch.equal(getattr(renderer, name), getattr(trainer.renderer, name)), name
    _, original = load_scene(DataConfig(path=str(DEMO), downscale=8, normalize=False))
    assert not torch.allclose(renderer.viewmats, torch.stack([f.camera.viewmat for f in original.train]))
    assert torch.equal(renderer.filter, trainer.renderer.filter)  # the checkpoint's, restored exactly
    viewed = load_viewed_scene(tmp_path / "run", Console(quiet=True), device="cpu")  # view draws what eval scores
    assert type(viewed.renderer).__name__ == "MipSplattingRenderer"
    assert torch.equal(viewed.renderer.filter, trainer.renderer.filter) and len(viewed.train) == 48


# -- the command line ----------------------------------------------------------------------------
MIP_SECTION = f"{{type: mip_splatting, backend: torch, filter_scale: {FILTER_SCALE}}}"


def fit(folder: Path, scene: Path, steps: int, *overrides: str, renderer: str = MIP_SECTION) -> Path:
    """Train on ``scene`` with the CLI (32x32 views, ``renderer``), returns the run folder."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "cfg.yaml"
    config.write_text(f"""
name: mip
output_dir: {folder / 'run'}
imports: [{EXAMPLE}]
data: {{path: {scene}, downscale: 4, normalize: true}}
renderer: {renderer}
trainer: {{max_steps: {steps}, val_interval: 0, schedule_steps: {steps}}}
model: {{sh_degree: 1, init: {{num_points: 300}}}}
strategy: {{refine_start_iter: 5, refine_every: 10, refine_stop_iter: {steps - 5}}}
default_hooks: {{checkpoint: {{publish: true}}}}
metrics: {{lpips: false}}
writers: []
""")
    result = run_cli("fit", "--config", str(config), "--quiet", *overrides)
    assert result.returncode == 0, result.stderr
    return folder / "run"


@pytest.fixture(scope="module")
def mip_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mip")
    return fit(folder, DEMO, 40)


def plain_psnr(path: Path, normalize: bool) -> float:
    """The test views' PSNR of a scene file drawn by the PyTorch renderer alone (no filter), with
    the cameras of the frame it was written in."""
    scene_file = read_gaussians_file_full(path)
    model = GaussianModel(scene_file.params, scene_file.sh_degree)
    return plain_render_psnr(model, normalize, scene_file.antialiased)


def plain_render_psnr(model: GaussianModel, normalize: bool, antialiased: bool) -> float:
    _, scene = load_scene(DataConfig(path=str(DEMO), downscale=4, normalize=normalize))
    pipeline = DataPipeline(scene, torch.ones(3), torch.device("cpu"), prefetch=False)
    evaluator = Evaluator(False, "alex", torch.device("cpu"), lambda _: None)
    renderer = TorchRenderer(rasterize_mode="antialiased" if antialiased else "classic")
    with torch.no_grad():
        scores = [evaluator(renderer.render(model, batch["camera"], model.sh_degree, torch.ones(3)).rgb, batch["image"])
                  for batch in pipeline.test_batches()]
    return mean_metrics(scores)["psnr"]


def test_eval_export_and_the_runs_scene_files_show_what_the_run_scored(mip_run, tmp_path):
    scored = json.loads((mip_run / "results.json").read_text())["psnr"]
    result = run_cli("eval", str(mip_run), "--import", str(EXAMPLE), "--out", str(tmp_path / "eval"))
    assert result.returncode == 0, result.stderr
    evaluated = json.loads((tmp_path / "eval" / "metrics.json").read_text())["psnr"]
    assert evaluated == pytest.approx(scored, abs=1e-6)

    for fmt in ("ply", "spz"):
        out = tmp_path / f"scene.{fmt}"
        result = run_cli("export", str(mip_run), "--import", str(EXAMPLE), "--format", fmt, "--out", str(out))
        assert result.returncode == 0, result.stderr
        assert plain_psnr(out, normalize=False) == pytest.approx(evaluated, abs=0.05), fmt  # the dataset's frame
    for written in (mip_run / "ply" / "step_000040.ply", mip_run / "scene.ply"):  # the normalised frame
        assert read_gaussians_file_full(written).antialiased
        assert plain_psnr(written, normalize=True) == pytest.approx(evaluated, abs=1e-3), written.name
    raw = GaussianModel(load_checkpoint_file(mip_run / "ckpt" / "last.pt")["gaussians"], 1)
    assert abs(plain_render_psnr(raw, True, True) - evaluated) > 0.1  # the filter is what was scored

    published = run_cli("eval", str(mip_run / "ckpt" / "published.pt"), "--import", str(EXAMPLE),
                        "--out", str(tmp_path / "published"))
    assert published.returncode == 0, published.stderr
    assert json.loads((tmp_path / "published" / "metrics.json").read_text())["psnr"] == pytest.approx(scored, abs=1e-6)


def test_export_of_a_run_whose_renderer_folds_needs_its_plugin(mip_run, tmp_path):
    result = run_cli("export", str(mip_run), "--out", str(tmp_path / "scene.ply"))
    assert_one_line_error(result, "renderer 'mip_splatting'", "--import PATH_OR_MODULE", "--trust-config")
    assert not (tmp_path / "scene.ply").exists()


def test_a_checkpoint_without_renderer_state_still_evaluates(mip_run, tmp_path):
    checkpoint = load_checkpoint_file(mip_run / "ckpt" / "last.pt")
    del checkpoint["renderer"]
    (tmp_path / "old" / "ckpt").mkdir(parents=True)
    save_checkpoint_file(checkpoint, tmp_path / "old" / "ckpt" / "last.pt")
    result = run_cli("eval", str(tmp_path / "old" / "ckpt" / "last.pt"), "--import", str(EXAMPLE),
                     "--out", str(tmp_path / "eval"))
    assert result.returncode == 0, result.stderr
    assert 5.0 < json.loads((tmp_path / "eval" / "metrics.json").read_text())["psnr"] < 60.0


def test_a_renderer_that_needs_the_gone_scene_names_it_in_one_line(tmp_path):
    scene = tmp_path / "scene"
    shutil.copytree(DEMO, scene)
    run = fit(tmp_path / "mip", scene, 12, "data.downscale=8")
    plain = fit(tmp_path / "plain", scene, 12, "data.downscale=8", renderer="{type: torch}")
    before = {p.name: p.read_bytes() for p in (run / "ckpt").iterdir()}
    scene.rename(tmp_path / "moved")
    for command in (["export", str(run), "--out", str(tmp_path / "scene.ply")],
                    ["view", str(run), "--port", "0", "--out", str(tmp_path / "views")]):
        result = run_cli(*command, "--import", str(EXAMPLE), timeout=120)
        assert_one_line_error(result, "MipSplattingRenderer", f"'{scene}'")
    assert not (tmp_path / "scene.ply").exists() and not (tmp_path / "views").exists()
    assert {p.name: p.read_bytes() for p in (run / "ckpt").iterdir()} == before
    result = run_cli("export", str(plain), "--out", str(tmp_path / "plain.ply"))  # needs no scene: as before
    assert result.returncode == 0, result.stderr
    assert read_gaussians_file_full(tmp_path / "plain.ply").params["means"].shape[0] > 0


# -- the docs ------------------------------------------------------------------------------------
def test_extending_docs_quote_the_example_and_its_lifecycle():
    text = (REPO / "docs" / "extending.md").read_text()
    assert EXAMPLE.read_text() in re.findall(r"```python\n(.*?)```", text, re.S)
    section = text[text.index("## Renderers"):text.index("## Datasets")]
    lifecycle = section[section.index("**Lifecycle.**"):]
    lifecycle = lifecycle[:lifecycle.index("```")]
    calls = ["setup", "load_state_dict", "render", "gaussians_moved", "state_dict", "export_gaussians"]
    assert re.findall(r"^\d\. `(\w+)\(", lifecycle, re.M) == calls  # in call order
    assert all(callable(getattr(Renderer, name)) for name in calls) and "`needs_scene" in lifecycle
