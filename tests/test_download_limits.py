"""LPIPS weight downloads against hostile servers on 127.0.0.1: sizes, rates, odd headers, server
text, stop signals and weight files that would inflate when loaded."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import REPO, tiny_config_text
from lpips_weights import FILES, write_inflating_backbone, write_weights
from splattrain import download as download_module
from splattrain.metrics import lpips_files
from splattrain.cli import main
from splattrain.metrics.lpips_files import SOURCES
from splattrain.metrics import Evaluator
from test_lpips_download import console_to, hub  # noqa: F401 - the fixture
from weight_server import WeightServer, declaring, drip, endless, files_under, point_sources, status, weight_bytes

BACKBONE = "/models/" + FILES["alex"]
#: Server text that would drive a terminal: a colour, a window title, a bell, a carriage return.
HOSTILE = "\x1b[31mred\x1b]0;title\x07\rback"


def lpips_warnings(monkeypatch, files, reply=None, cut=1.0):
    """The warnings of a first use of LPIPS against a server answering with ``reply``."""
    with WeightServer(files, cut=cut, reply=reply) as server:
        point_sources(monkeypatch, server.url, files)
        warnings = []
        scorer = Evaluator(True, "alex", torch.device("cpu"), warnings.append, lpips_download=True,
                           progress=console_to(io.StringIO()).transfer)
    assert scorer.unavailable("lpips") is not None
    assert len(warnings) == 1 and "\n" not in warnings[0] and "LPIPS disabled, reported as null" in warnings[0]
    return warnings[0], server


def test_every_weight_file_has_its_size_next_to_its_digest():
    sizes = {source.name: source.size for pair in SOURCES.values() for source in pair}
    assert sizes == {"alexnet-owt-7be5be79.pth": 244_408_911, "alex.pth": 6_009,
                     "vgg16-397923af.pth": 553_433_881, "vgg.pth": 7_289}


@pytest.mark.parametrize("declared", [str(10**15), "1"])
def test_a_declared_size_other_than_the_files_is_refused(hub, monkeypatch, declared):
    files = weight_bytes()
    warning, _ = lpips_warnings(monkeypatch, files, declaring(declared))
    assert f"the server declares {int(declared):,} bytes; the file is {len(files[BACKBONE]):,}" in warning
    assert files_under(hub) == []


def test_a_body_without_a_length_stops_past_the_files_size(hub, monkeypatch):
    files = weight_bytes()
    size = len(files[BACKBONE])
    warning, server = lpips_warnings(monkeypatch, files, endless(times=16))
    assert f"the server sent more than the file's {size:,} bytes" in warning
    assert files_under(hub) == []
    assert server.sent < 8 * size  # the client hung up: the server could not write it all


def test_a_body_without_a_length_of_the_right_size_is_taken(hub, monkeypatch):
    files = weight_bytes()
    with WeightServer(files, reply=declaring()) as server:
        point_sources(monkeypatch, server.url, files)
        warnings = []
        Evaluator(True, "alex", torch.device("cpu"), warnings.append, lpips_download=True)
    assert warnings == [] and (hub / "checkpoints" / FILES["alex"]).read_bytes() == files[BACKBONE]


@pytest.mark.parametrize("headers", [False, True], ids=["body", "headers"])
def test_a_slow_drip_is_ended(hub, monkeypatch, headers):
    monkeypatch.setattr(download_module, "GRACE_S", 1.0)
    monkeypatch.setattr(download_module, "MIN_RATE", 1024)
    start = time.monotonic()
    warning, server = lpips_warnings(monkeypatch, weight_bytes(), drip(headers=headers, interval=0.2))
    assert "too slow: " in warning and "below 1 KiB/s after the first 1 s" in warning
    assert time.monotonic() - start < 20  # the server would drip for 30 s
    assert files_under(hub) == []


@pytest.mark.parametrize("length", ["²", "³", "١٢", "-1", "12abc", "0x10", "1e3", ""])
def test_an_odd_content_length_is_one_warning(hub, monkeypatch, length):
    warning, _ = lpips_warnings(monkeypatch, weight_bytes(), declaring(length))
    assert "the server sent an invalid Content-Length: " in warning and files_under(hub) == []


def test_two_different_content_lengths_are_one_warning(hub, monkeypatch):
    files = weight_bytes()
    size = len(files[BACKBONE])
    warning, _ = lpips_warnings(monkeypatch, files, declaring(str(size), str(size + 1)))
    assert "2 different Content-Length headers" in warning and files_under(hub) == []


def test_download_weights_with_an_odd_header_is_one_error_line(hub, monkeypatch, tmp_path, capsys):
    files = weight_bytes()
    with WeightServer(files, reply=declaring("²")) as server:
        point_sources(monkeypatch, server.url, files)
        assert main(["download-weights", "lpips", "--dir", str(tmp_path / "weights")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: could not download") and "invalid Content-Length" in err[0]
    assert files_under(tmp_path / "weights") == []


REPLIES = {
    "reason": (status(404, f"Not {HOSTILE}"), "HTTP 404 Not \\x1b[31mred\\x1b]0;title\\x07\\rback"),
    "location": (status(302, "Found", Location=f"file:///etc/passwd{HOSTILE}"),
                 "Redirection to url 'file:///etc/passwd\\x1b[31mred"),
}


@pytest.mark.parametrize("name", list(REPLIES))
def test_server_text_is_shown_with_control_characters_escaped(hub, monkeypatch, tmp_path, capsys, name):
    reply, shown = REPLIES[name]
    files = weight_bytes()
    warning, _ = lpips_warnings(monkeypatch, files, reply)
    assert shown in warning and not any(char in warning for char in "\x1b\x07\r")
    with WeightServer(files, reply=reply) as server:
        point_sources(monkeypatch, server.url, files)
        assert main(["download-weights", "lpips", "--dir", str(tmp_path / "weights")]) == 2
    err = capsys.readouterr().err
    assert shown in err and not any(char in err for char in "\x1b\x07\r") and len(err.strip().splitlines()) == 1
    assert files_under(hub) == [] and files_under(tmp_path / "weights") == []


@pytest.mark.parametrize("reply, shown", [(declaring("²"), "invalid Content-Length: '²'"),
                                          (REPLIES["location"][0], REPLIES["location"][1])], ids=["length", "location"])
def test_fit_goes_on_without_lpips_when_the_server_is_hostile(hub, monkeypatch, tmp_path, capsys, reply, shown):
    files = weight_bytes()
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, steps=2).replace("lpips: false", "lpips: true"))
    with WeightServer(files, reply=reply) as server:
        point_sources(monkeypatch, server.url, files)
        assert main(["fit", "--config", str(cfg), "writers=[]", "default_hooks.checkpoint=null"]) == 0
    assert json.loads((tmp_path / "run" / "results.json").read_text())["lpips"] is None
    log = (tmp_path / "run" / "log.txt").read_text()
    warned = [line for line in log.splitlines() if line.startswith("warning: LPIPS disabled")]
    assert len(warned) == 1 and shown in warned[0]
    captured = capsys.readouterr()
    assert not any(char in log + captured.out + captured.err for char in "\x1b\x07\r")
    assert files_under(hub) == []


def test_a_redirect_is_followed(hub, monkeypatch):
    files = weight_bytes()
    moved = {f"/moved{path}": body for path, body in files.items()}
    with WeightServer({**files, **moved}) as server:
        point_sources(monkeypatch, server.url, files)
        redirect = status(302, "Found", Location=f"{server.url}/moved{BACKBONE}")
        server.reply = lambda handler, body, srv: (redirect if handler.path == BACKBONE else declaring(str(len(body))))(
            handler, body, srv)
        warnings = []
        Evaluator(True, "alex", torch.device("cpu"), warnings.append, lpips_download=True)
        assert server.requests[:2] == [BACKBONE, f"/moved{BACKBONE}"]
    assert warnings == [] and (hub / "checkpoints" / FILES["alex"]).read_bytes() == files[BACKBONE]


@pytest.mark.parametrize("length", [True, False], ids=["with-length", "without-length"])
def test_an_html_page_served_as_the_file_leaves_nothing(hub, monkeypatch, length):
    page = b"<!doctype html><html><body>Sign in to continue</body></html>"

    def html(handler, body, server):
        handler.send_response(200)
        handler.send_header("Content-Type", "text/html")
        if length:
            handler.send_header("Content-Length", str(len(page)))
        handler.end_headers()
        handler.wfile.write(page)

    files = weight_bytes()
    warning, _ = lpips_warnings(monkeypatch, files, html)
    size = len(files[BACKBONE])
    expected = f"declares {len(page):,} bytes; the file is {size:,}" if length else f"closed after {len(page):,} of"
    assert expected in warning and files_under(hub) == []


def launch(server_url: str, files, folder: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "download_launch.py"), server_url + BACKBONE,
         hashlib.sha256(files[BACKBONE]).hexdigest(), str(len(files[BACKBONE])), str(folder), *extra],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, what: str, process: subprocess.Popen, limit: float = 120.0) -> None:
    """Wait until ``condition()`` holds (the process still running), failing after ``limit`` seconds."""
    end = time.monotonic() + limit
    while not condition():
        assert process.poll() is None, (what, process.communicate())
        assert time.monotonic() < end, f"{what} within {limit:g} s"
        time.sleep(0.05)


def test_sigterm_during_a_slow_download_leaves_no_temporary(hub, tmp_path):
    files = weight_bytes()
    folder = tmp_path / "weights"
    with WeightServer(files, reply=drip(headers=False, interval=0.2, limit=120)) as server:
        process = launch(server.url, files, folder)
        wait_for(lambda: server.sent > 0 and files_under(folder) != [], "a temporary file", process)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines() == ["stopped by SIGTERM"]  # acted on at once: the watchdog was not needed
    assert files_under(folder) == []


def test_the_watchdog_removes_the_temporary_when_no_safe_point_comes(hub, tmp_path):
    files = weight_bytes()
    folder, marker = tmp_path / "weights", tmp_path / "stuck"
    with WeightServer(files) as server:
        process = launch(server.url, files, folder, "--stuck", str(marker))
        wait_for(marker.exists, "the download to get stuck", process)
        assert any(path.name.endswith(".tmp") for path in files_under(folder))
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, err
    assert "no safe point came within 1 s; ended at once" in err
    assert files_under(folder) == []


@pytest.fixture(scope="module")
def inflating(tmp_path_factory) -> Path:
    """A weights folder whose backbone file inflates to 256 MiB when loaded (the linear layers real)."""
    folder = write_weights(tmp_path_factory.mktemp("inflating"), backbone=False)
    write_inflating_backbone(folder / FILES["alex"], inflated=256 * 2**20)
    return folder


def test_a_weight_file_that_would_inflate_is_refused_before_loading(inflating, tmp_path):
    script = f"""
import json
from splattrain.metrics.lpips_files import build_lpips
def peak_kib():  # this process's peak resident memory (getrusage's carries over from the parent)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
before = peak_kib()
model, why = build_lpips("alex", {str(inflating)!r})
print(json.dumps({{"model": model is not None, "why": why, "grown_mib": (peak_kib() - before) / 1024}}))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TORCH_HOME": str(tmp_path / "torch")})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert not report["model"] and report["grown_mib"] < 128, report
    assert f"LPIPS weight file {inflating / FILES['alex']} has a compressed member 'archive/data/0'" in report["why"]


def test_eval_with_an_inflating_weight_file_is_one_warning(inflating, monkeypatch):
    monkeypatch.setattr(lpips_files, "lpips_package_weights_dir", lambda: None)
    warnings = []
    scorer = Evaluator(True, "alex", torch.device("cpu"), warnings.append, lpips_weights=str(inflating))
    assert len(warnings) == 1 and "compressed member" in warnings[0] and scorer.unavailable("lpips")


def test_a_stored_weight_file_declaring_more_than_it_holds_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(lpips_files, "lpips_package_weights_dir", lambda: None)
    folder = write_weights(tmp_path / "weights")
    path = folder / FILES["alex"]
    data = bytearray(path.read_bytes())
    directory = data.rindex(b"PK\x01\x02")  # the last member's central directory entry: its size fields
    data[directory + 20:directory + 28] = (2**31).to_bytes(4, "little") * 2
    path.write_bytes(bytes(data))
    model, why = lpips_files.build_lpips("alex", folder)
    assert model is None and f"LPIPS weight file {path} declares" in why and "truncated or corrupted" in why

