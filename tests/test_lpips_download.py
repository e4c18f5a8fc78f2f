"""LPIPS weights fetched on first use: the real download code against a local server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal

import pytest
import torch
from rich.console import Console as RichConsole

from conftest import tiny_config_text
from lpips_weights import FILES
from splattrain import interrupts
from splattrain.metrics import lpips_files
from splattrain.cli import main
from splattrain.console import Console
from splattrain.download import download
from splattrain.metrics.lpips_files import FETCH_COMMAND, SOURCES, hub_folders
from splattrain.metrics import Evaluator
from test_lpips import images, reference_lpips
from weight_server import WeightServer, closed_port, files_under, point_sources, weight_bytes


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """An empty torch hub cache under tmp_path, no lpips package to take files from, and every
    source on a local port where nothing listens until a test points it at its server."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(lpips_files, "lpips_package_weights_dir", lambda: None)
    for net in SOURCES:
        nowhere = {f"/models/{FILES[net]}": b"", f"/lpips/v0.1/{net}.pth": b""}
        point_sources(monkeypatch, f"http://127.0.0.1:{closed_port()}", nowhere, net)
    return tmp_path / "torch" / "hub"


def console_to(out: io.StringIO, tty: bool = False) -> Console:
    return Console(terminal=RichConsole(file=out, force_terminal=tty, width=200))


def evaluator(warnings, out=None, download=True, net="alex"):
    console = console_to(out if out is not None else io.StringIO())
    return Evaluator(True, net, torch.device("cpu"), warnings.append, lpips_download=download,
                     progress=console.transfer)


def test_the_published_digests_are_written_out_in_full_and_match_torchvision_names():
    for net, (backbone, linear) in SOURCES.items():
        assert backbone.url == f"https://download.pytorch.org/models/{FILES[net]}"
        assert linear.url == f"https://github.com/richzhang/PerceptualSimilarity/raw/master/lpips/weights/v0.1/{net}.pth"
        for source in (backbone, linear):
            assert len(source.sha256) == 64 and int(source.sha256, 16) >= 0
        assert FILES[net].split("-")[-1].split(".")[0] == backbone.sha256[:8]  # torchvision's own prefix


@pytest.mark.parametrize("net", ["alex", "vgg"])
def test_first_use_downloads_verifies_and_computes(net, hub, monkeypatch):
    files = weight_bytes(net)
    with WeightServer(files) as server:
        point_sources(monkeypatch, server.url, files, net)
        warnings, out = [], io.StringIO()
        scorer = evaluator(warnings, out, net=net)
        assert warnings == [] and len(server.requests) == 2
        backbone_dir, linear_dir = hub_folders()
        assert (backbone_dir / FILES[net]).read_bytes() == files[f"/models/{FILES[net]}"]
        assert (linear_dir / f"{net}.pth").read_bytes() == files[f"/lpips/v0.1/{net}.pth"]
        assert files_under(hub) == sorted([backbone_dir / FILES[net], linear_dir / f"{net}.pth"])  # no temporaries
        shown = out.getvalue()
        assert f"downloading {FILES[net]} from {server.url}/models/{FILES[net]}" in shown
        assert f"downloaded {net}.pth from" in shown
        x, y = images(n=1, size=64 if net == "alex" else 32)
        expected = reference_lpips(x.permute(0, 3, 1, 2), y.permute(0, 3, 1, 2), net)
        assert scorer(x, y)["lpips"] == pytest.approx(float(expected), rel=1e-4)
        evaluator(warnings, net=net)  # the second run finds them
        assert warnings == [] and len(server.requests) == 2


def test_a_live_terminal_shows_a_transfer_bar(hub, monkeypatch):
    files = weight_bytes()
    with WeightServer(files) as server:
        point_sources(monkeypatch, server.url, files)
        out = io.StringIO()
        console = console_to(out, tty=True)
        Evaluator(True, "alex", torch.device("cpu"), console.warning, lpips_download=True, progress=console.transfer)
    shown = out.getvalue()
    assert "\x1b[" in shown and "warning" not in shown
    assert f"{len(files['/models/' + FILES['alex']]) / 2**20:.1f} MiB" in shown  # size, from Content-Length


def test_hash_mismatch_leaves_nothing_and_says_where_the_file_goes(hub, monkeypatch):
    files = weight_bytes()
    with WeightServer(files) as server:
        point_sources(monkeypatch, server.url, files, sha256="0" * 64)
        warnings = []
        scorer = evaluator(warnings)
    assert len(warnings) == 1 and "\n" not in warnings[0]
    backbone = hub / "checkpoints" / FILES["alex"]
    for fragment in (f"{server.url}/models/{FILES['alex']}", "SHA-256", "expected " + "0" * 64, str(backbone),
                     FETCH_COMMAND, "LPIPS disabled, reported as null"):
        assert fragment in warnings[0], fragment
    assert files_under(hub) == []
    x, y = images(n=1, size=32)
    assert scorer(x, y)["lpips"] is None


def test_a_download_cut_short_leaves_nothing(hub, monkeypatch):
    files = weight_bytes()
    with WeightServer(files, cut=0.5) as server:
        point_sources(monkeypatch, server.url, files)
        warnings = []
        evaluator(warnings)
    size = len(files["/models/" + FILES["alex"]])
    assert len(warnings) == 1 and f"closed after {size // 2:,} of {size:,} bytes" in warnings[0]
    assert FETCH_COMMAND in warnings[0] and files_under(hub) == []


def test_offline_is_one_warning_naming_the_command(hub, monkeypatch):
    port = closed_port()
    files = weight_bytes()
    point_sources(monkeypatch, f"http://127.0.0.1:{port}", files)
    warnings = []
    scorer = evaluator(warnings)
    assert len(warnings) == 1 and "connection refused" in warnings[0]
    assert f"`{FETCH_COMMAND}` where there is network" in warnings[0]
    assert str(hub / "checkpoints") in warnings[0] and files_under(hub) == []
    assert scorer.unavailable("lpips") is not None and scorer.unavailable("psnr") is None


def test_download_off_asks_nothing_and_names_the_command(hub, monkeypatch):
    files = weight_bytes()
    with WeightServer(files) as server:
        point_sources(monkeypatch, server.url, files)
        warnings = []
        evaluator(warnings, download=False)
        assert server.requests == []
    assert len(warnings) == 1 and "metrics.lpips_download is false" in warnings[0] and FETCH_COMMAND in warnings[0]


def test_download_weights_command_fetches_verifies_and_refuses_a_different_file(hub, monkeypatch, tmp_path, capsys):
    files = weight_bytes()
    folder = tmp_path / "weights"
    with WeightServer(files) as server:
        point_sources(monkeypatch, server.url, files)
        assert main(["download-weights", "lpips", "--dir", str(folder)]) == 0
        assert sorted(p.name for p in files_under(folder)) == ["alex.pth", FILES["alex"]]
        assert main(["download-weights", "lpips", "--dir", str(folder)]) == 0  # verified, not fetched again
        assert len(server.requests) == 2
        out = capsys.readouterr().out
        assert out.count("already there") == 2 and "metrics.lpips_weights" in out
        assert main(["download-weights", "lpips"]) == 0  # into the hub cache
        assert len(files_under(hub)) == 2
        (folder / "alex.pth").write_bytes(b"someone else's file")
        capsys.readouterr()
        assert main(["download-weights", "lpips", "--dir", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "remove it to download it again" in err[0] and str(folder / "alex.pth") in err[0]
    assert (folder / "alex.pth").read_bytes() == b"someone else's file"
    sha = hashlib.sha256(files["/lpips/v0.1/alex.pth"]).hexdigest()
    assert sha != hashlib.sha256(b"someone else's file").hexdigest()


def test_first_fit_fetches_the_weights_and_reports_a_numeric_lpips(hub, monkeypatch, tmp_path, capsys):
    files = weight_bytes()
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, steps=2).replace("lpips: false", "lpips: true"))
    with WeightServer(files) as server:
        point_sources(monkeypatch, server.url, files)
        assert main(["fit", "--config", str(cfg), "writers=[]", "default_hooks.checkpoint=null"]) == 0
        assert len(server.requests) == 2
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert isinstance(results["lpips"], float) and results["lpips"] > 0
    assert f"downloaded {FILES['alex']}" in (tmp_path / "run" / "log.txt").read_text()
    assert "lpips 0." in capsys.readouterr().out.strip().splitlines()[-1]  # the done: line


def test_a_stop_signal_during_a_download_leaves_nothing(hub, monkeypatch):
    files = weight_bytes()
    path = "/models/" + FILES["alex"]
    assert len(files[path]) > 2 * 2**20  # several chunks

    @contextlib.contextmanager
    def progress(description, total):
        yield lambda received: os.kill(os.getpid(), signal.SIGINT)  # recorded, acted on before the next chunk

    with WeightServer(files) as server:
        interrupts.defer()
        try:
            with pytest.raises(interrupts.Interrupted):
                download(server.url + path, hub / "checkpoints" / FILES["alex"],
                         hashlib.sha256(files[path]).hexdigest(), len(files[path]), progress)
        finally:
            interrupts.restore()
    assert files_under(hub) == []


def test_a_cache_folder_that_cannot_be_written_is_one_warning(hub, monkeypatch):
    files = weight_bytes()
    hub.mkdir(parents=True)
    (hub / "checkpoints").write_text("a file where the folder should be")
    with WeightServer(files) as server:
        point_sources(monkeypatch, server.url, files)
        warnings = []
        evaluator(warnings)
    assert len(warnings) == 1 and "cannot be saved there" in warnings[0] and str(hub / "checkpoints") in warnings[0]
    assert files_under(hub) == [hub / "checkpoints"]
