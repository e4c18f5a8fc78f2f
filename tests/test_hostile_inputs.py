"""Files a user is sent and folders beside a config: a crafted checkpoint never runs code, a stray
module never shadows a package, and every refusal is one line with exit code 2."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
import torch

from cli_check import assert_one_line_error, files_of, run_cli, trained, write_config  # noqa: F401
from splattrain.checkpoints.files import FORMAT, load_checkpoint_file


class _WritesFile:
    """Unpickling this writes a file: what a crafted checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('code ran')",)


def _crafted_checkpoints(folder: Path, marker: Path) -> list[Path]:
    """A checkpoint with a valid header and checksum whose payload runs code, and a bare pickle."""
    buffer = io.BytesIO()
    torch.save({"step": 1, "config": {}, "sh_degree": 0, "gaussians": _WritesFile(marker)}, buffer)
    payload = buffer.getvalue()
    wrapped = folder / "wrapped.pt"
    torch.save({"format": FORMAT, "sha256": hashlib.sha256(payload).hexdigest(), "payload": payload}, wrapped)
    bare = folder / "bare.pt"
    torch.save({"format": FORMAT, "payload": _WritesFile(marker)}, bare)
    return [wrapped, bare]


# -- a crafted checkpoint never runs code ----------------------------------------------------
@pytest.mark.parametrize("command", ["eval", "export", "render", "fit"])
def test_crafted_checkpoint_runs_no_code(tmp_path, trained, command):
    marker = tmp_path / "pwned.txt"
    for crafted in _crafted_checkpoints(tmp_path, marker):
        if command == "fit":
            config = write_config(tmp_path, tmp_path / "run")
            result = run_cli("fit", "--config", str(config), "--resume", str(crafted))
        else:
            result = run_cli(command, str(crafted), "--out", str(tmp_path / "out"))
        line = assert_one_line_error(result, str(crafted))
        assert "builtins.exec" in line or "not load" in line, line
        assert not marker.exists()
    assert not (tmp_path / "run" / "config.yaml").exists()


def test_old_format_checkpoint_is_refused_in_one_line(tmp_path, trained):
    """A 0.1.0 checkpoint stored numpy's RNG state as an ndarray, which is not plain data."""
    import numpy as np

    state = load_checkpoint_file(trained / "ckpt" / "last.pt")
    state["rng"]["numpy"] = np.random.get_state()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    old = tmp_path / "old.pt"
    torch.save({"format": FORMAT, "sha256": hashlib.sha256(payload).hexdigest(), "payload": payload}, old)
    assert_one_line_error(run_cli("export", str(old), "--out", str(tmp_path / "x.ply")), str(old), "0.1.0")


def test_checkpoint_with_missing_keys_is_refused(tmp_path, trained):
    buffer = io.BytesIO()
    torch.save({"step": 3, "config": {}}, buffer)
    payload = buffer.getvalue()
    partial = tmp_path / "partial.pt"
    torch.save({"format": FORMAT, "sha256": hashlib.sha256(payload).hexdigest(), "payload": payload}, partial)
    assert_one_line_error(run_cli("eval", str(partial)), str(partial), "sh_degree, gaussians")
    config = write_config(tmp_path, tmp_path / "run")
    assert_one_line_error(run_cli("fit", "--config", str(config), "--resume", str(partial)), str(partial))


# -- nothing is imported from the config's folder unless named ------------------------------
def test_modules_beside_a_config_do_not_shadow_packages(tmp_path):
    folder = tmp_path / "configs"
    marker = tmp_path / "shadowed.txt"
    for name in ("lpips", "numpy", "yaml"):
        folder.mkdir(exist_ok=True)
        (folder / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write('{name}')\n")
    (folder / "my_plugin.py").write_text("VALUE = 1\n")
    config = write_config(folder, tmp_path / "run", extra="imports: [my_plugin]")
    config.write_text(config.read_text().replace("lpips: false", "lpips: true"))
    result = run_cli("fit", "--config", str(config), "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not marker.exists(), marker.read_text()
    assert "LPIPS disabled" in (tmp_path / "run" / "log.txt").read_text()  # lpips.py beside the config not used




# -- no message suggests unsafe loading --------------------------------------------------
def test_checkpoint_errors_never_suggest_unsafe_loading(tmp_path, trained):
    import numpy as np

    raw = (trained / "ckpt" / "last.pt").read_bytes()
    (tmp_path / "short.pt").write_bytes(raw[: len(raw) // 3])
    torch.save({"format": FORMAT, "payload": np.zeros(3)}, tmp_path / "numpy.pt")
    for name, fragment in [("short.pt", "truncated or corrupted"), ("numpy.pt", "does not load")]:
        for command in ("eval", "export"):
            line = assert_one_line_error(run_cli(command, str(tmp_path / name)), str(tmp_path / name), fragment)
            assert "weights_only" not in line



# -- resume refuses a strategy change; a checkpoint of averaged weights resumes its training weights --
def test_resume_refuses_a_strategy_change(tmp_path, trained):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = files_of(run)
    config = write_config(tmp_path, run, steps=4)
    result = run_cli("fit", "--config", str(config), "--resume", "strategy={type: mcmc, max_gaussians: 500}")
    assert_one_line_error(result, "strategy.type: 'default' -> 'mcmc'")
    assert files_of(run) == before


def test_resume_without_the_ema_hook_trains_from_the_training_weights(tmp_path):
    from resume_check import make_trainer
    from splattrain.checkpoints.files import load_checkpoint_file

    ema = "custom_hooks:\n  - {type: EMAHook, momentum: 0.5}\n"
    with_ema = make_trainer(tmp_path, "ema", steps=6, extra=ema)
    with_ema.train()
    saved = load_checkpoint_file(tmp_path / "ema" / "ckpt" / "step_000006.pt")
    training = saved["training_gaussians"]
    assert not torch.equal(saved["gaussians"]["means"], training["means"])  # the file holds the averages
    without = make_trainer(tmp_path, "plain", steps=12)
    without.load_checkpoint(tmp_path / "ema" / "ckpt" / "step_000006.pt")
    for name, weights in training.items():
        assert torch.equal(without.model.params[name].detach(), weights), name
