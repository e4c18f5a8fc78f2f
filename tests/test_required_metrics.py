"""A hook that needs a validation metric says so before training: refused at build and by
--dry-run when the metric can never be computed; a missing value mid-run is None, not a crash."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cli_check import assert_one_line_error, run_cli
from conftest import tiny_config_text
from lpips_weights import FILES
from splattrain.metrics import lpips_files
from splattrain.cli import main
from splattrain.hooks import Hook
from splattrain.hooks.checkpoint_hook import CheckPointHook
from splattrain.hooks.early_stopping import EarlyStoppingHook
from weight_server import WeightServer, closed_port, files_under, point_sources, weight_bytes

EARLY_LPIPS = "custom_hooks:\n  - {type: EarlyStoppingHook, monitor: lpips, patience: 2}\n"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """An empty torch hub cache (also for the commands the test starts), no lpips package."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(lpips_files, "lpips_package_weights_dir", lambda: None)
    return tmp_path / "torch" / "hub"


def config(tmp_path, extra: str = EARLY_LPIPS, lpips: bool = True):
    path = tmp_path / "cfg.yaml"
    path.write_text(tiny_config_text(tmp_path, steps=4, extra=extra).replace("lpips: false", f"lpips: {str(lpips).lower()}"))
    return path


def test_the_built_in_hooks_name_what_they_need():
    assert EarlyStoppingHook(monitor="lpips").required_metrics() == ("lpips",)
    assert CheckPointHook(save_best="lpips").required_metrics() == ("lpips",)
    assert CheckPointHook(save_best="auto").required_metrics() == ("psnr",)
    assert CheckPointHook().required_metrics() == () and Hook().required_metrics() == ()


def test_dry_run_refuses_early_stopping_on_lpips_without_weights(hub, tmp_path):
    result = run_cli("fit", "--config", str(config(tmp_path)), "--dry-run", "metrics.lpips_download=false")
    line = assert_one_line_error(result, "EarlyStoppingHook needs the validation metric 'lpips'", FILES["alex"],
                                 "metrics.lpips_download is false", "splattrain download-weights lpips")
    assert str(hub / "checkpoints") in line and "LPIPS disabled" not in result.stdout  # one line, not a warning too


def test_save_best_lpips_with_lpips_off_is_refused(tmp_path):
    result = run_cli("fit", "--config", str(config(tmp_path, extra="", lpips=False)), "--dry-run",
                     "default_hooks.checkpoint.save_best=lpips")
    assert_one_line_error(result, "CheckPointHook 'checkpoint' needs the validation metric 'lpips'",
                          "metrics.lpips is false")


def test_a_failed_download_refuses_the_run_before_training(hub, monkeypatch, tmp_path, capsys):
    files = weight_bytes()
    point_sources(monkeypatch, f"http://127.0.0.1:{closed_port()}", files)
    assert main(["fit", "--config", str(config(tmp_path)), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "connection refused" in err[0] and "EarlyStoppingHook" in err[0]
    assert not (tmp_path / "run").exists() and files_under(hub) == []


def test_dry_run_fetches_what_a_hook_needs_and_then_passes(hub, monkeypatch, tmp_path):
    files = weight_bytes()
    with WeightServer(files) as server:
        point_sources(monkeypatch, server.url, files)
        assert main(["fit", "--config", str(config(tmp_path)), "--dry-run"]) == 0
        assert len(server.requests) == 2 and len(files_under(hub)) == 2
        assert main(["fit", "--config", str(config(tmp_path)), "--dry-run"]) == 0
        assert len(server.requests) == 2


def test_a_hook_given_none_for_a_missing_value_goes_on():
    warnings, stops = [], []
    trainer = SimpleNamespace(step=4, console=SimpleNamespace(warning=lambda message, once=None: warnings.append(message)),
                              request_stop=stops.append)
    hook = EarlyStoppingHook(monitor="lpips", patience=1)
    hook.after_val(trainer, {"step": 2, "psnr": 20.0, "lpips": 0.3})
    hook.after_val(trainer, {"step": 4, "psnr": 20.0, "lpips": None})
    assert stops == [] and hook.best == 0.3 and hook.bad_validations == 0
    assert len(warnings) == 1 and "no lpips in the validation at step 4" in warnings[0]
    hook.after_val(trainer, {"step": 6, "psnr": 20.0, "lpips": 0.4})
    assert len(stops) == 1
