"""Writers: TensorBoard events, jsonl, csv, PNG grids, wandb, mlflow, a custom writer, failures."""

from __future__ import annotations

import csv
import glob
import importlib.util
import io
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image
from rich.console import Console as RichConsole

from conftest import REPO, tiny_config_text
from splattrain import WRITERS, Writer
from splattrain.cli import main
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from splattrain.errors import ConfigError
from splattrain.writers import WriterGroup, check_writer_spec
from splattrain.writers.grids import validation_grid
from splattrain.writers.jsonl import JsonlWriter

HAS_WANDB = importlib.util.find_spec("wandb") is not None
HAS_MLFLOW = importlib.util.find_spec("mlflow") is not None
SIZE = 32  # the demo scene's 128 px at data.downscale=4
STEPS = [5, 10]  # log interval 5, validation every 5 of 10 steps
GRID_VIEWS = ["r_0", "r_1", "r_2", "r_3"]  # LogHook's num_val_images=4


@WRITERS.register()
class BrokenImageWriter(Writer):
    """Fails on its first image, like a full disk (test helper)."""

    def write_image(self, tag, image, step) -> None:
        raise OSError("[Errno 28] No space left on device")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One short run writing to every writer at once; returns its directory and console output."""
    tmp = tmp_path_factory.mktemp("writers")
    writers = ["tensorboard", "jsonl", "csv", "image", "BrokenImageWriter", "SqliteWriter"]
    writers += ["wandb"] * HAS_WANDB + ["mlflow"] * HAS_MLFLOW
    extra = f"imports: [{REPO / 'examples' / 'my_writer.py'}]\nwriters:\n" + "".join(f"  - type: {w}\n" for w in writers)
    (tmp / "cfg.yaml").write_text(tiny_config_text(tmp, steps=10, extra=extra))
    cfg = load_config(tmp / "cfg.yaml", ["trainer.val_interval=5", "default_hooks.logger.interval=5"])
    terminal = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
            mp.setenv(name, str(tmp / "wandb_home"))
        mp.delenv("WANDB_MODE", raising=False)
        mp.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
        trainer = DefaultTrainer(cfg, console=Console(terminal=RichConsole(file=terminal, width=120)))
        trainer.train()
    return SimpleNamespace(dir=tmp / "run", terminal=terminal.getvalue(), trainer=trainer)


def test_tensorboard_events_have_tags_steps_images_histograms_and_config(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run.dir / "tb"), size_guidance={"scalars": 0, "images": 0, "histograms": 0, "tensors": 0})
    events.Reload()
    tags = events.Tags()
    for tag in ["train/loss", "loss/l1", "loss/dssim", "train/ema_loss", "train/num_gaussians", "lr/means",
                "lr/scales", "lr/opacities", "time/step_ms", "memory/rss_mb"]:
        assert [e.step for e in events.Scalars(tag)] == STEPS, tag
    for tag in ["val/psnr", "val/ssim"]:
        assert [e.step for e in events.Scalars(tag)] == STEPS, tag
    assert "val/lpips" not in tags["scalars"]  # metrics.lpips is off: nothing logged rather than a fake value
    assert events.Scalars("train/num_gaussians")[0].value == 300
    assert sorted(tags["images"]) == [f"val/{view}" for view in GRID_VIEWS]
    for image in events.Images("val/r_0"):
        assert (image.width, image.height) == (4 * SIZE, SIZE)  # render | truth | error | depth
        # the same pixels as the image writer's file of that step
        pixels = np.asarray(Image.open(io.BytesIO(image.encoded_image_string)))
        saved = np.asarray(Image.open(run.dir / "images" / "val" / f"step_{image.step:06d}" / "r_0.png"))
        assert pixels.shape == (SIZE, 4 * SIZE, 3) and np.array_equal(pixels, saved) and pixels.std() > 0
    assert [image.step for image in events.Images("val/r_0")] == STEPS
    for tag in ["gaussians/opacity", "gaussians/log_scale"]:
        histograms = events.Histograms(tag)
        assert [h.step for h in histograms] == STEPS
        assert histograms[0].histogram_value.num == (300 if tag.endswith("opacity") else 900)
    assert "config/text_summary" in tags["tensors"]
    text = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "max_steps: 10" in text


def test_jsonl_has_one_object_per_logging_call(run):
    rows = [json.loads(line) for line in (run.dir / "metrics.jsonl").read_text().splitlines()]
    train = [row for row in rows if "train/loss" in row]
    val = [row for row in rows if "val/psnr" in row]
    assert [row["step"] for row in train] == STEPS and [row["step"] for row in val] == STEPS
    assert {"train/ema_loss", "lr/means", "lr/sh0", "time/step_ms", "train/num_gaussians"} <= set(train[0])
    assert val[-1]["val/psnr"] == pytest.approx(run.trainer.last_metrics["psnr"])


def test_jsonl_writes_non_finite_values_as_null(tmp_path):
    writer = JsonlWriter(tmp_path)
    writer.write_scalars({"a": float("nan"), "b": 1.5}, 3)
    writer.close()
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"step": 3, "a": None, "b": 1.5}


def test_csv_rows_match_jsonl(run):
    with open(run.dir / "scalars.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["step", "tag", "value"]
    from_csv = {(int(step), tag): float(value) for step, tag, value in rows[1:]}
    from_jsonl = {
        (row["step"], tag): value
        for row in map(json.loads, (run.dir / "metrics.jsonl").read_text().splitlines())
        for tag, value in row.items()
        if tag != "step"
    }
    assert from_csv == pytest.approx(from_jsonl)


def test_image_writer_saves_grids(run):
    for step in STEPS:
        files = sorted(p.name for p in (run.dir / "images" / "val" / f"step_{step:06d}").iterdir())
        assert files == [f"{view}.png" for view in GRID_VIEWS]
    image = Image.open(run.dir / "images" / "val" / "step_000010" / "r_0.png")
    assert image.size == (4 * SIZE, SIZE) and image.mode == "RGB"


def test_validation_grid_panels():
    rng = np.random.default_rng(0)
    render = rng.random((8, 6, 3), dtype=np.float32)
    depth = rng.random((8, 6, 1), dtype=np.float32) + 1.0
    alpha = np.ones((8, 6, 1), dtype=np.float32)
    grid = validation_grid(render, render, depth, alpha)
    assert grid.shape == (8, 24, 3) and grid.dtype == np.uint8
    np.testing.assert_array_equal(grid[:, :6], grid[:, 6:12])  # render | truth
    assert grid[:, 12:18].max() == 0  # no error: black
    panel = grid[:, 18:].astype(int)
    near = np.unravel_index(depth[..., 0].argmin(), (8, 6))
    far = np.unravel_index(depth[..., 0].argmax(), (8, 6))
    assert panel[near][0] > 100 > panel[near][2]  # nearest pixel red
    assert panel[far][2] > panel[far][0]  # farthest pixel blue
    wrong = validation_grid(render, np.clip(render + 0.5, 0, 1))
    assert wrong.shape == (8, 18, 3) and wrong[:, 12:].min() > 0  # no depth panel; errors show


def test_custom_writer_example_runs_and_matches_the_docs(run):
    with sqlite3.connect(run.dir / "metrics.sqlite") as db:
        psnr = db.execute("SELECT step, value FROM scalars WHERE run = 'run' AND tag = 'val/psnr' ORDER BY step").fetchall()
        config = db.execute("SELECT yaml FROM configs").fetchone()[0]
    assert [step for step, _ in psnr] == STEPS
    assert psnr[-1][1] == pytest.approx(run.trainer.last_metrics["psnr"])
    assert "max_steps: 10" in config
    docs = (REPO / "docs" / "writers.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", docs, re.S)
    assert (REPO / "examples" / "my_writer.py").read_text() in blocks


def test_failing_writer_is_reported_once_by_name_and_others_keep_writing(run):
    log = (run.dir / "log.txt").read_text()
    warnings = [line for line in log.splitlines() if "BrokenImageWriter" in line]
    assert len(warnings) == 1
    assert "write_image" in warnings[0] and "[Errno 28] No space left on device" in warnings[0] and "disabled" in warnings[0]
    assert "BrokenImageWriter" in run.terminal
    assert (run.dir / "images" / "val" / "step_000010" / "r_3.png").is_file()  # writers after it kept going
    assert run.trainer.step == 10


def test_writer_group_disables_a_writer_failing_in_any_method():
    class Flaky(Writer):
        def __init__(self) -> None:
            super().__init__(".")
            self.calls = 0

        def write_histogram(self, tag, values, step) -> None:
            raise RuntimeError("tracker down")

        def write_scalars(self, scalars, step) -> None:
            self.calls += 1

    warnings, flaky, healthy = [], Flaky(), Flaky()
    healthy.write_histogram = lambda tag, values, step: None
    group = WriterGroup([flaky, healthy], warn=warnings.append)
    for step in range(3):
        group.write_histogram("h", np.zeros(3), step)
        group.write_scalars({"a": 1.0}, step)
    assert len(warnings) == 1 and "Flaky failed in write_histogram (RuntimeError: tracker down)" in warnings[0]
    assert flaky.calls == 0 and healthy.calls == 3 and group.writers == [healthy]


@pytest.mark.skipif(not HAS_WANDB, reason="wandb is not installed")
def test_wandb_offline_run_has_scalars_images_and_histograms(run):
    (run_dir,) = glob.glob(str(run.dir / "wandb" / "offline-run-*"))
    (records,) = glob.glob(f"{run_dir}/run-*.wandb")
    data = Path(records).read_bytes()
    for tag in [b"train/loss", b"val/psnr", b"lr/means", b"gaussians/opacity", b"val/r_0", b"max_steps"]:
        assert tag in data, tag
    images = glob.glob(f"{run_dir}/files/media/images/val/*.png")
    assert len(images) == len(GRID_VIEWS) * len(STEPS)
    assert Image.open(images[0]).size == (4 * SIZE, SIZE)


@pytest.mark.skipif(not HAS_MLFLOW, reason="mlflow is not installed")
def test_mlflow_file_store_has_metrics_params_and_artifacts(run, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = mlflow.MlflowClient(tracking_uri=(run.dir / "mlruns").resolve().as_uri())
    (found,) = client.search_runs([client.get_experiment_by_name("splattrain").experiment_id])
    assert found.info.run_name == "run" and found.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(found.info.run_id, "val/psnr")] == STEPS
    assert [m.step for m in client.get_metric_history(found.info.run_id, "train/ema_loss")] == STEPS
    assert found.data.params["trainer.max_steps"] == "10"
    artifacts = Path(found.info.artifact_uri.removeprefix("file://"))
    assert "max_steps: 10" in (artifacts / "config.yaml").read_text()
    assert Image.open(artifacts / "images" / "val" / "r_0" / "step_000010.png").size == (4 * SIZE, SIZE)


@pytest.mark.parametrize("kind", ["wandb", "mlflow"])
def test_missing_optional_package_fails_at_start_in_one_line(tmp_path, monkeypatch, capsys, kind):
    monkeypatch.setitem(__import__("sys").modules, kind, None)  # makes `import kind` fail
    with pytest.raises(ConfigError, match=re.escape(f"pip install 'splattrain[{kind}]'")):
        WRITERS.build({"type": kind}, run_dir=tmp_path)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, steps=2, extra=f"writers:\n  - type: {kind}\n"))
    for args in (["--dry-run"], []):
        assert main(["fit", "--config", str(cfg), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {cfg}: writers[0]: writer ") and f"splattrain[{kind}]" in err[0], err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_dry_run_checks_and_lists_writers(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, extra="writers:\n  - type: csv\n    filename: s.csv\n  - type: jsonl\n"))
    assert main(["fit", "--config", str(cfg), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "CsvWriter" in out and "filename=s.csv" in out and "JsonlWriter" in out and "max_steps: 30" in out
    assert not (tmp_path / "run").exists()
    cfg.write_text(tiny_config_text(tmp_path, extra="writers:\n  - type: jsonn\n"))
    assert main(["fit", "--config", str(cfg), "--dry-run"]) == 2
    assert "'jsonl'" in capsys.readouterr().err  # did you mean
    cfg.write_text(tiny_config_text(tmp_path, extra="writers:\n  - type: csv\n    file: s.csv\n"))
    assert main(["fit", "--config", str(cfg), "--dry-run"]) == 2
    assert "csv" in capsys.readouterr().err


def test_list_writers_describes_every_builtin(capsys):
    assert main(["list", "writers"]) == 0
    out = capsys.readouterr().out
    for name in ["tensorboard", "jsonl", "csv", "image", "wandb", "mlflow"]:
        assert re.search(rf"│ {name}\s+│ \S", out), name
    assert "Weights & Biases" in out and "MLflow run" in out


def test_dvclive_writer_against_the_real_package(tmp_path):
    """In dvclive's own package folder (scripts/setup.sh; its dvc needs omegaconf < 2.4), or in
    this environment where dvclive is installed in it."""
    import os
    import subprocess

    folder = Path(sys.prefix) / "dvclive-packages"
    env = dict(os.environ)
    if folder.is_dir():
        env["PYTHONPATH"] = os.pathsep.join([str(folder), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    else:
        assert importlib.util.find_spec("dvclive"), f"dvclive is neither in {folder} nor installed: run scripts/test.sh"
    result = subprocess.run([sys.executable, str(REPO / "tests" / "dvclive_check.py"), str(tmp_path)], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all checks hold" in result.stdout


def test_neptune_writer_offline_against_the_real_package(tmp_path):
    from splattrain.writers.neptune_writer import NeptuneWriter

    writer = NeptuneWriter(tmp_path / "run", tags=["demo"])
    writer.write_config({"trainer": {"max_steps": 30}, "data": {"background": [1, 1, 1]}}, "name: t\n")
    writer.write_scalars({"train/loss": 0.5, "val/psnr": float("inf")}, 10)
    writer.write_scalars({"train/loss": 0.25}, 20)
    writer.write_image("val/r_0", np.zeros((4, 5, 3), np.float32), 20)
    writer.flush()
    writer.close()
    logs = list((tmp_path / "run" / ".neptune" / "offline").glob("run__*/data-1.log"))
    assert len(logs) == 1
    ops = [json.loads(line)["obj"] for line in logs[0].read_text().splitlines()]
    floats = [(v["step"], v["value"]) for op in ops if op["type"] == "LogFloats" and op["path"] == ["train", "loss"]
              for v in op["values"]]
    assert floats == [(10, 0.5), (20, 0.25)]
    assert not [op for op in ops if op["path"] == ["val", "psnr"]]  # inf skipped, like jsonl's null
    assigned = {tuple(op["path"]): op.get("value") for op in ops if op["type"].startswith("Assign")}
    assert assigned[("config", "trainer", "max_steps")] == 30 and assigned[("config", "data", "background")] == "[1, 1, 1]"
    assert assigned[("config.yaml",)] == "name: t\n"
    assert any(op["type"] == "LogImages" and op["path"] == ["val", "r_0"] for op in ops)


def test_csv_and_jsonl_agree_on_non_finite_values(tmp_path):
    from splattrain.writers.csv_writer import CsvWriter
    from splattrain.writers.jsonl import JsonlWriter

    scalars = {"a": 1.5, "b": float("nan"), "c": float("-inf")}
    for cls in (CsvWriter, JsonlWriter):
        writer = cls(tmp_path)
        writer.write_scalars(scalars, 3)
        writer.close()
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    with open(tmp_path / "scalars.csv", newline="") as handle:
        cells = {r["tag"]: r["value"] for r in csv.DictReader(handle)}
    assert row == {"step": 3, "a": 1.5, "b": None, "c": None}
    assert cells == {"a": "1.5", "b": "", "c": ""}


@pytest.mark.parametrize("name, module", [("dvclive", "dvclive"), ("neptune", "neptune")])
def test_missing_dvclive_or_neptune_names_the_extra(monkeypatch, name, module):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ConfigError, match=rf"splattrain\[{name}\]"):
        check_writer_spec({"type": name})


def test_tensorboard_writer_leaves_out_remote_file_systems(tmp_path):
    """The writer's import leaves out TensorBoard's S3 and fsspec back-ends (start-up time; a run
    writes to a local folder), which still import afterwards for anyone who needs them."""
    code = (
        "import sys, importlib.util\n"
        "from splattrain.writers.tensorboard import TensorboardWriter\n"
        f"writer = TensorboardWriter({str(tmp_path)!r})\n"
        "writer.write_scalar('a', 1.0, 1); writer.close()\n"
        "print(sorted(n for n in ('botocore', 'boto3', 'fsspec') if n in sys.modules))\n"
        "for name in ('botocore', 'fsspec'):\n"
        "    if importlib.util.find_spec(name) is not None:\n"
        "        __import__(name)\n"
        "print('imports afterwards')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["[]", "imports afterwards"]
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_a_writers_list_without_the_image_writer_is_named_in_the_header(tmp_path):
    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=2, extra="writers:\n  - type: jsonl\n"))
    assert main(["fit", "--config", str(tmp_path / "cfg.yaml"), "--quiet"]) == 0
    log = (tmp_path / "run" / "log.txt").read_text()
    assert "no image writer, so validation images are not saved as PNGs" in log
    assert not (tmp_path / "run" / "images").exists()
    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=2))  # the default list keeps them
    assert main(["fit", "--config", str(tmp_path / "cfg.yaml"), "--quiet", "--overwrite"]) == 0
    assert "no image writer" not in (tmp_path / "run" / "log.txt").read_text()
