"""Config loading: defaults, overrides, and errors that name the key and the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from splattrain.engine import load_config
from splattrain.errors import ConfigError

BASE = "name: t\ndata:\n  path: somewhere\n"


def test_defaults_overrides_and_output_dir(write_config):
    path = write_config(BASE + "trainer:\n  max_steps: 123\n")
    cfg = load_config(path, ["trainer.val_interval=7", "data.background=[0,0,0]", "renderer.type=torch"])
    assert cfg.trainer.max_steps == 123
    assert cfg.trainer.val_interval == 7
    assert list(cfg.data.background) == [0.0, 0.0, 0.0]
    assert cfg.renderer.type == "torch"
    assert cfg.output_dir == "outputs/t"
    assert cfg.loss.ssim_lambda is None and cfg.loss.terms is None  # the default terms


def test_override_values_are_typed(write_config):
    cfg = load_config(write_config(BASE), ["trainer.max_steps=50", "optim.sh0_lr=1e-3"])
    assert isinstance(cfg.trainer.max_steps, int) and cfg.trainer.max_steps == 50
    assert cfg.optim.sh0_lr == pytest.approx(1e-3)


def test_unknown_key_in_file_names_key_file_and_suggestion(write_config):
    path = write_config(BASE + "trainer:\n  max_step: 5\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message
    assert "trainer.max_step" in message
    assert "max_steps" in message  # the close match


def test_unknown_section_suggests_close_name(write_config):
    with pytest.raises(ConfigError, match=r"trainr.*trainer"):
        load_config(write_config(BASE + "trainr:\n  max_steps: 5\n"))


def test_wrong_type_in_file(write_config):
    path = write_config(BASE + "trainer:\n  max_steps: lots\n")
    with pytest.raises(ConfigError, match=r"trainer\.max_steps.*'lots'"):
        load_config(path)


def test_wrong_type_in_override_names_override(write_config):
    with pytest.raises(ConfigError) as info:
        load_config(write_config(BASE), ["trainer.max_steps=abc"])
    assert "overrides" in str(info.value) and "trainer.max_steps" in str(info.value)


def test_unknown_override_key(write_config):
    with pytest.raises(ConfigError, match=r"renderer\.tpye.*type"):
        load_config(write_config(BASE), ["renderer.tpye=torch"])


def test_malformed_override(write_config):
    with pytest.raises(ConfigError, match="dotted.key=value"):
        load_config(write_config(BASE), ["trainer.max_steps"])


def test_missing_file():
    with pytest.raises(ConfigError, match="nope.yaml' not found"):
        load_config("nope.yaml")


def test_missing_required_key(write_config):
    with pytest.raises(ConfigError, match=r"missing required key 'data.path'"):
        load_config(write_config("name: t\n"))


def test_invalid_yaml_names_line(write_config):
    path = write_config("name: t\ndata: [\n")
    with pytest.raises(ConfigError, match=r"line \d+"):
        load_config(path)


def test_bad_choice_and_range(write_config):
    with pytest.raises(ConfigError, match="rasterize_mode"):
        load_config(write_config(BASE), ["renderer.rasterize_mode=fancy"])
    with pytest.raises(ConfigError, match=r"trainer\.max_steps' must be > 0"):
        load_config(write_config(BASE), ["trainer.max_steps=0"])


def test_hook_and_writer_lists_need_types(write_config):
    with pytest.raises(ConfigError, match="custom_hooks"):
        load_config(write_config(BASE + "custom_hooks:\n  - interval: 3\n"))
    with pytest.raises(ConfigError, match="default_hooks.logger"):
        load_config(write_config(BASE + "default_hooks:\n  logger: 5\n"))


def test_override_into_a_list_is_a_config_error(write_config):
    path = write_config(BASE + "custom_hooks:\n  - {type: LogHook}\n")
    with pytest.raises(ConfigError, match="cannot reach into lists"):
        load_config(path, ["custom_hooks.0.interval=5"])


def test_plugin_sections_are_checked_at_load_and_numbers_in_text_are_read(write_config):
    text = BASE + "strategy:\n  grow_grad2d: 2e-4\nrenderer:\n  type: torch\n  near_plane: 1e-2\n"
    cfg = load_config(write_config(text))
    from splattrain.render import build_renderer
    from splattrain.strategy import build_strategy

    assert build_strategy(cfg.strategy).grow_grad2d == pytest.approx(2e-4)
    assert build_renderer(cfg.renderer, torch.device("cpu")).near_plane == pytest.approx(0.01)
    with pytest.raises(ConfigError, match=r"cfg\.yaml.*strategy 'default': unknown option 'strategy\.grow_grad'"):
        load_config(write_config(BASE), ["strategy.grow_grad=0.1"])
    with pytest.raises(ConfigError, match=r"loss term 'dssim': unknown option 'loss\.terms\[1\]\.wieght'.*weight"):
        load_config(write_config(BASE + "loss:\n  terms: [{type: l1}, {type: dssim, wieght: 0.2}]\n"))
    with pytest.raises(ConfigError, match=r"hook 'checkpoint' \(CheckPointHook\): unknown option 'default_hooks\.checkpoint\.intervall'"):
        load_config(write_config(BASE), ["default_hooks.checkpoint.intervall=3"])
    with pytest.raises(ConfigError, match=r"loss\.ssim_lambda and loss\.terms are both set"):
        load_config(write_config(BASE + "loss:\n  ssim_lambda: 0.3\n  terms: [{type: l1}]\n"))


def test_the_viewer_demo_trains_as_the_demo():
    """configs/demo_viewer.yaml is configs/demo.yaml with the viewer: the same training settings."""
    configs = Path(__file__).resolve().parent.parent / "configs"
    demo = OmegaConf.to_container(load_config(configs / "demo.yaml"))
    viewer = OmegaConf.to_container(load_config(configs / "demo_viewer.yaml"))
    assert viewer["default_hooks"].pop("viewer")["port"] == 8080
    demo["default_hooks"].pop("viewer", None)
    for cfg in (demo, viewer):
        del cfg["name"], cfg["output_dir"]
    assert viewer == demo
