"""Plugins travel with a run only when asked: eval / render / export of a run trained with a
custom renderer or dataset reader give the run's own numbers with ``--import`` (or
``--trust-config``), and one line + exit 2 naming the plugin and the flags without."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_check import REPO, assert_one_line_error, run_cli, write_config

RENDERER = REPO / "examples" / "my_renderer.py"
DATASET = REPO / "examples" / "my_dataset.py"


def _fit(tmp_path: Path, extra: str, *overrides: str) -> Path:
    run = tmp_path / "run"
    config = write_config(tmp_path, run, steps=6, extra=extra)
    result = run_cli("fit", "--config", str(config), "--quiet", *overrides)
    assert result.returncode == 0, result.stderr
    return run


@pytest.fixture(scope="module")
def renderer_run(tmp_path_factory) -> Path:
    """A run trained with examples/my_renderer.py's lowres renderer (16x16 views, rendered at 8x8)."""
    return _fit(tmp_path_factory.mktemp("lowres"), f"imports: [{RENDERER}]\n", "renderer.type=lowres",
                "renderer.backend=torch", "renderer.factor=2")


@pytest.fixture(scope="module")
def dataset_run(tmp_path_factory) -> Path:
    """A run whose scene was read by examples/my_dataset.py's reader (found by data.type auto)."""
    folder = tmp_path_factory.mktemp("cameras_json")
    from test_extending import write_cameras_json

    write_cameras_json(folder / "scene")
    return _fit(folder, f"imports: [{DATASET}]\n", f"data.path={folder / 'scene'}", "data.type=auto",
                "data.downscale=8")


def _psnr(run: Path) -> float:
    return json.loads((run / "results.json").read_text())["psnr"]


@pytest.mark.parametrize("which, plugin", [("renderer", "renderer 'lowres'"), ("dataset", "dataset reader 'cameras_json'")])
def test_without_the_flags_one_line_names_the_plugin(which, plugin, renderer_run, dataset_run, tmp_path):
    run = renderer_run if which == "renderer" else dataset_run
    for command in (["eval", str(run), "--out", str(tmp_path / "eval")],
                    ["render", str(run), "--out", str(tmp_path / "render")]):
        result = run_cli(*command)
        assert_one_line_error(result, plugin, "--import PATH_OR_MODULE", "--trust-config")
    assert not (tmp_path / "eval" / "metrics.json").exists()  # nothing written with another plugin


@pytest.mark.parametrize("which, plugin", [("renderer", "renderer 'lowres'"), ("dataset", "dataset reader 'cameras_json'")])
def test_view_of_a_custom_plugin_run_needs_the_flags_too(which, plugin, renderer_run, dataset_run, tmp_path):
    """No viewer opens (with a warning, or another reader's cameras): one line, exit 2, before the viewer starts."""
    run = renderer_run if which == "renderer" else dataset_run
    result = run_cli("view", str(run), "--port", "0", "--out", str(tmp_path / "views"), timeout=120)
    assert_one_line_error(result, plugin, "--import PATH_OR_MODULE", "--trust-config")
    assert "viewer:" not in result.stdout and not (tmp_path / "views").exists()


def test_export_needs_no_plugin(renderer_run, dataset_run, tmp_path):
    """A PLY is the Gaussians alone: export builds neither the renderer nor the dataset reader."""
    for run in (renderer_run, dataset_run):
        result = run_cli("export", str(run), "--out", str(tmp_path / f"{run.parent.name}.ply"))
        assert result.returncode == 0, result.stderr
        assert (tmp_path / f"{run.parent.name}.ply").stat().st_size > 0


@pytest.mark.parametrize("which", ["renderer", "dataset"])
def test_eval_with_import_or_trust_config_gives_the_runs_numbers(which, renderer_run, dataset_run, tmp_path):
    run, module = (renderer_run, RENDERER) if which == "renderer" else (dataset_run, DATASET)
    for flags, out in (["--import", str(module)], "imported"), (["--trust-config"], "trusted"):
        result = run_cli("eval", str(run), "--out", str(tmp_path / out), *flags)
        assert result.returncode == 0, result.stderr
        metrics = json.loads((tmp_path / out / "metrics.json").read_text())
        assert metrics["psnr"] == pytest.approx(_psnr(run), abs=1e-4)
        assert len(metrics["per_view"]) == 10


def test_render_and_export_with_import(renderer_run, tmp_path):
    result = run_cli("render", str(renderer_run), "--out", str(tmp_path / "frames"), "--import", str(RENDERER))
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "frames" / "frames").glob("frame_*.png"))) == 10
    assert (tmp_path / "frames" / "render.gif").is_file()
    exported = run_cli("export", str(renderer_run), "--out", str(tmp_path / "scene.ply"), "--import", str(RENDERER))
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "scene.ply").stat().st_size > 0


def test_an_import_that_does_not_exist_is_one_line(renderer_run):
    result = run_cli("eval", str(renderer_run), "--import", "no_such_plugin_module")
    assert_one_line_error(result, "no_such_plugin_module")
