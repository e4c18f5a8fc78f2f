"""Configs built on presets with ``_base_``: merged mappings, replaced lists, ``_delete_``,
imports that add up, a base's paths read from its own folder, chains, and loops refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cli_check import assert_one_line_error, run_cli
from conftest import DEMO, REPO
from splattrain.config import read_config
from splattrain.errors import ConfigError

PRESET = REPO / "configs" / "demo.yaml"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_config_on_the_demo_preset_changes_only_what_it_says(tmp_path):
    mine = _write(tmp_path / "my.yaml", f"""
_base_: {PRESET}
name: mine
trainer: {{val_interval: 100}}
loss:
  terms: [{{type: l1, weight: 1.0}}]
custom_hooks:
  - {{type: EarlyStoppingHook, patience: 2}}
""")
    cfg, preset = read_config(mine), read_config(PRESET)
    assert cfg.name == "mine" and cfg.trainer.val_interval == 100
    assert cfg.trainer.max_steps == preset.trainer.max_steps  # merged, not replaced
    assert cfg.optim.means_lr == preset.optim.means_lr and cfg.strategy == preset.strategy
    assert OmegaConf.to_container(cfg.loss.terms) == [{"type": "l1", "weight": 1.0}]  # a list is replaced
    assert [h.type for h in cfg.custom_hooks] == ["EarlyStoppingHook"]
    assert Path(cfg.data.path) == DEMO.resolve()  # the preset's data/demo, found beside it, from any folder


def test_delete_replaces_a_mapping_and_imports_add_up(tmp_path):
    plugin = _write(tmp_path / "presets" / "plugin.py", "")
    _write(tmp_path / "presets" / "base.yaml", f"""
name: base
imports: [plugin.py]
data: {{path: {DEMO}}}
strategy: {{type: default, refine_every: 50, reset_every: 900}}
""")
    mine = _write(tmp_path / "runs" / "my.yaml", """
_base_: ../presets/base.yaml
imports: [other_plugin]
strategy: {_delete_: true, type: mcmc, cap_max: 1000}
""")
    data = OmegaConf.to_container(read_config(mine))
    assert data["strategy"] == {"type": "mcmc", "cap_max": 1000}
    assert data["imports"] == [str(plugin.resolve()), "other_plugin"]


def test_bases_chain_and_merge_in_order(tmp_path):
    _write(tmp_path / "a.yaml", f"name: a\ndata: {{path: {DEMO}}}\ntrainer: {{max_steps: 10, val_interval: 5}}\n")
    _write(tmp_path / "b.yaml", "name: b\ntrainer: {max_steps: 20}\n")
    _write(tmp_path / "c.yaml", "_base_: [a.yaml, b.yaml]\nseed: 7\n")
    mine = _write(tmp_path / "d.yaml", "_base_: c.yaml\n")
    cfg = read_config(mine)
    assert (cfg.name, cfg.trainer.max_steps, cfg.trainer.val_interval, cfg.seed) == ("b", 20, 5, 7)


@pytest.mark.parametrize("files, culprit, message", [
    ({"a.yaml": "_base_: b.yaml\nname: a\n", "b.yaml": "_base_: a.yaml\n"}, "a.yaml", "comes back to this file"),
    ({"a.yaml": "_base_: a.yaml\n"}, "a.yaml", "comes back to this file"),
    ({"a.yaml": "_base_: missing.yaml\n"}, "missing.yaml", "not found"),
    ({"a.yaml": "_base_: 5\n"}, "a.yaml", "must be a config file or a list"),
    ({"a.yaml": "_base_: []\n"}, "a.yaml", "must be a config file or a list"),
    ({"a.yaml": "_base_: b.yaml\ndata: {_delete_: maybe}\n", "b.yaml": "name: b\n"}, "a.yaml", "_delete_' must be true or false"),
])
def test_bad_bases_are_one_line(tmp_path, files, culprit, message):
    for name, text in files.items():
        _write(tmp_path / name, text)
    with pytest.raises(ConfigError, match=message) as caught:
        read_config(tmp_path / "a.yaml")
    assert culprit in str(caught.value) and "\n" not in str(caught.value)
    result = run_cli("fit", "--config", str(tmp_path / "a.yaml"), "--dry-run")
    assert_one_line_error(result, culprit, message)


def test_fit_trains_a_config_built_on_the_preset_and_dry_run_shows_it_merged(tmp_path):
    mine = _write(tmp_path / "my.yaml", f"""
_base_: {PRESET}
name: mine
output_dir: {tmp_path / 'run'}
writers: []
metrics: {{lpips: false}}
data: {{downscale: 4}}
loss:
  terms: [{{type: l1, weight: 0.9}}, {{type: dssim, weight: 0.1}}]
custom_hooks:
  - {{type: EarlyStoppingHook, patience: 5}}
""")
    dry = run_cli("fit", "--config", str(mine), "--dry-run", "trainer.max_steps=20")
    assert dry.returncode == 0, dry.stderr
    assert "_base_" not in dry.stdout and "EarlyStoppingHook" in dry.stdout and "weight: 0.9" in dry.stdout
    assert "means_lr: 0.0012" in dry.stdout  # the preset's own settings, merged in
    fit = run_cli("fit", "--config", str(mine), "--quiet", "trainer.max_steps=20")
    assert fit.returncode == 0, fit.stderr
    saved = OmegaConf.load(tmp_path / "run" / "config.yaml")
    assert saved.custom_hooks[0].type == "EarlyStoppingHook" and saved.loss.terms[0].weight == 0.9
