"""Finding the scene: COLMAP project layouts, nerfstudio one level down, data.path next to the config."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO
from splattrain.config.schema import DataConfig
from splattrain.synthetic.demo_variants import write_colmap_project
from splattrain.data.loading import load_scene
from splattrain.errors import DataError
from test_cli import assert_one_line_error, run_cli


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """dense/0 (images/ + sparse/) and the distorted sparse/0 at the top, no images/ there."""
    root = tmp_path_factory.mktemp("colmap") / "project"
    write_colmap_project(root, size=24, n_views=8)
    return root


def copy(project: Path, dst: Path) -> Path:
    shutil.copytree(project, dst)
    return dst


def test_dense_layout_is_found_from_the_project_root(project: Path) -> None:
    kind, scene = load_scene(DataConfig(path=str(project)))
    assert kind == "colmap" and len(scene.train) + len(scene.test) == 8
    assert scene.source == str(project / "dense" / "0")
    assert any("using" in note and str(project / "dense" / "0") in note for note in scene.extra["notes"])
    assert scene.train[0].camera.width == 24  # the undistorted PINHOLE model, not the distorted one
    # explicit type finds it too
    assert load_scene(DataConfig(path=str(project), type="colmap"))[1].source == str(project / "dense" / "0")


def test_several_models_are_listed_and_one_can_be_chosen(project: Path, tmp_path: Path) -> None:
    root = copy(project / "dense" / "0", tmp_path / "scene")
    (root / "sparse").rename(tmp_path / "model")
    (root / "sparse").mkdir()
    shutil.copytree(tmp_path / "model", root / "sparse" / "0")
    shutil.copytree(tmp_path / "model", root / "sparse" / "1")
    with pytest.raises(DataError) as info:
        load_scene(DataConfig(path=str(root)))
    message = str(info.value)
    assert "2 scenes" in message and "sparse/0" in message and "sparse/1" in message and "data.options.model" in message
    _, scene = load_scene(DataConfig(path=str(root), options={"model": "sparse/1"}))
    assert any(note.endswith(f"from {root / 'sparse' / '1'}") for note in scene.extra["notes"])


def test_single_non_zero_model_is_used_and_named(project: Path, tmp_path: Path) -> None:
    root = copy(project / "dense" / "0", tmp_path / "scene")
    (root / "sparse").rename(tmp_path / "model")
    (root / "sparse").mkdir()
    shutil.copytree(tmp_path / "model", root / "sparse" / "2")
    _, scene = load_scene(DataConfig(path=str(root)))
    assert any("sparse/2" in note for note in scene.extra["notes"])


def test_two_scene_folders_exit_2_listing_both(project: Path, tmp_path: Path) -> None:
    root = copy(project, tmp_path / "project")
    shutil.copytree(root / "dense" / "0", root / "dense" / "1")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"name: t\noutput_dir: {tmp_path / 'run'}\ndata:\n  path: {root}\n")
    result = run_cli("fit", "--config", str(cfg))
    assert_one_line_error(result, "2 scenes", str(root / "dense" / "0"), str(root / "dense" / "1"))


def test_nerfstudio_folder_one_level_down(project: Path, tmp_path: Path) -> None:
    inner = copy(project / "dense" / "0", tmp_path / "top" / "processed")
    shutil.rmtree(inner / "sparse")
    frames = [{"file_path": f"images/{p.name}", "transform_matrix": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, k], [0, 0, 0, 1]]}
              for k, p in enumerate(sorted((inner / "images").iterdir()))]
    meta = {"fl_x": 30.0, "fl_y": 30.0, "cx": 12, "cy": 12, "w": 24, "h": 24, "frames": frames}
    (inner / "transforms.json").write_text(json.dumps(meta))
    kind, scene = load_scene(DataConfig(path=str(tmp_path / "top")))
    assert kind == "nerfstudio" and scene.source == str(inner)


def test_relative_path_is_tried_next_to_the_config(tmp_path: Path) -> None:
    """`splattrain fit --config /elsewhere/configs/x.yaml` from another folder finds data/ beside configs/."""
    configs = tmp_path / "proj" / "configs"
    configs.mkdir(parents=True)
    (tmp_path / "proj" / "data").symlink_to(REPO / "data")
    cfg = configs / "x.yaml"
    cfg.write_text(
        f"name: t\noutput_dir: {tmp_path / 'run'}\ndata:\n  path: data/demo\n  downscale: 8\n"
        "trainer:\n  max_steps: 2\n  val_interval: 0\nmodel:\n  sh_degree: 0\n  init:\n    num_points: 100\n"
        "metrics:\n  lpips: false\nwriters: []\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_cli("fit", "--config", str(cfg), cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert "relative to the config file" in result.stdout + result.stderr
    assert str(tmp_path / "proj" / "data" / "demo") in result.stdout + result.stderr
