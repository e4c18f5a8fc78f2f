"""The viewer in a real browser (headless Chromium): the page shows the scene, Pause / Resume
stop and restart the step counter, a second tab works, and ``splattrain view`` shows a PLY.

Set SPLATTRAIN_DOCS_SCREENSHOT=docs/images/viewer.png to refresh the screenshot in docs/viewer.md.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from browser import Browser, correlation, require_browser, wait_until
from conftest import DEMO, REPO
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from splattrain.hooks import Hook, ViewerHook
from splattrain.viewer.camera import camera_pose

pytestmark = pytest.mark.slow  # a headless Chromium drives the viewer

WIDTH, HEIGHT = 1000, 600


def config_text(out: Path, steps: int, extra: str = "") -> str:
    return f"""
name: viewer_demo
output_dir: {out}
data:
  path: {DEMO}
  downscale: 2
trainer:
  max_steps: {steps}
  val_interval: 0
model:
  sh_degree: 1
  init:
    type: random
    num_points: 2000
metrics:
  lpips: false
writers: []
{extra}
"""


@pytest.fixture(scope="module")
def trained_ply(tmp_path_factory) -> Path:
    """The demo scene trained briefly at half resolution; its last PLY."""
    root = tmp_path_factory.mktemp("viewer_scene")
    cfg = root / "cfg.yaml"
    cfg.write_text(config_text(root / "run", 400, "strategy: {refine_start_iter: 100, refine_every: 100}\n"
                                           "default_hooks:\n  checkpoint: {interval: 0}\n"))
    DefaultTrainer(load_config(cfg), console=Console(quiet=True)).train()
    return root / "run" / "ply" / "step_000400.ply"


class Slow(Hook):
    """Keeps each step at least ``seconds`` long, so a person (or a test) can watch it; ``held``
    is set while the run is held by a pause."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.held = threading.Event()

    def after_train_iter(self, trainer, step, batch, outputs):
        time.sleep(self.seconds)

    def on_pause(self, trainer, paused: bool) -> None:
        (self.held.set if paused else self.held.clear)()


def served_twice_more(viewer: ViewerHook) -> None:
    """Wait until the held run's viewer has rendered the browser's view twice more (each asked
    for by a change of settings): the run went round its pause at least twice."""
    for _ in range(2):
        renders = viewer.service.renders
        viewer.server.mark_all_dirty()
        wait_until(lambda: viewer.service.renders > renders, what="the viewer to render while paused")


def build(root: Path, name: str, ply: Path, extra: str = "") -> DefaultTrainer:
    cfg = root / f"{name}.yaml"
    text = config_text(root / name, 200, extra).replace("type: random", f"ply: {ply}")
    cfg.write_text(text)
    return DefaultTrainer(load_config(cfg), console=Console(quiet=True))


def test_live_run_in_the_browser(tmp_path, trained_ply):
    require_browser()
    trainer = build(tmp_path, "watched", trained_ply, "default_hooks:\n  viewer: {port: 0, paused: true}\n")
    slow = Slow(0.02)
    trainer.register_hook(slow)
    viewer = next(h for h in trainer.hooks.hooks if isinstance(h, ViewerHook))
    errors: list = []
    thread = threading.Thread(target=lambda: _train(trainer, errors), daemon=True)
    started = time.perf_counter()
    thread.start()
    wait_until(lambda: viewer.server is not None and viewer.server.paused, what="the viewer to start paused")
    browser = Browser(WIDTH, HEIGHT)
    try:
        browser.open(viewer.server.url)
        wait_until(lambda: viewer.server.num_clients == 1, what="the browser to connect")
        wait_until(lambda: browser.step() == 0, what="the stats panel")
        overview = wait_until(lambda: _scene_shown(browser), what="the first render")
        _save_docs_screenshot(overview)

        # A fixed camera: the page shows what the renderer renders for that camera.
        camera = trainer.data.test_frames[0].camera
        client_id = next(iter(viewer.server.server.get_clients()))
        viewer.server.look_through(client_id, camera_pose(camera))
        reference = _reference(trainer, camera)
        wait_until(lambda: correlation(_square(browser.screenshot()), reference) > 0.9, timeout=30,
                   what="the view from the test camera")

        # Paused from the start: the counter stands still; Resume restarts it; Pause stops it.
        first = browser.step()
        served_twice_more(viewer)
        assert browser.step() == first == trainer.step == 0
        browser.click("Resume")
        wait_until(lambda: (browser.step() or 0) > 5, what="training to go on")
        browser.click("Pause")
        wait_until(slow.held.is_set, what="the run to be held")
        before = trainer.step
        wait_until(lambda: browser.step() == before and "(paused)" in browser.text(), what="the panel to show the pause")
        served_twice_more(viewer)
        assert browser.step() == before == trainer.step and 0 < before < 200

        # A second tab is a second client; closing it leaves the first one working.
        first_tab = browser.new_tab(viewer.server.url)
        wait_until(lambda: viewer.server.num_clients == 2, what="the second tab")
        browser.driver.close()
        browser.driver.switch_to.window(first_tab)
        wait_until(lambda: viewer.server.num_clients == 1, what="the second tab to close")
        browser.click("Resume")
        wait_until(lambda: (browser.step() or 0) > before, what="training to resume")
    finally:
        browser.close()
    thread.join(timeout=120)  # every tab closed: training finishes on its own
    assert not thread.is_alive() and not errors, errors
    assert viewer.service.renders > 0 and viewer.paused_seconds > 2.0
    assert 0 < trainer.train_seconds < time.perf_counter() - started - viewer.paused_seconds

    plain = build(tmp_path, "plain", trained_ply)
    plain.train()
    for name, value in plain.model.params.items():
        assert torch.equal(value, trainer.model.params[name]), name


FROZEN = ("optim: {means_lr: 0.0, scales_lr: 0.0, quats_lr: 0.0, opacities_lr: 0.0, sh0_lr: 0.0, "
          "shN_lr: 0.0}\nstrategy: {refine_start_iter: 100000}\n")


def test_a_still_view_is_sent_again_only_when_training_changed_it(tmp_path, trained_ply):
    """With refresh 0.1 s and a still camera, a learning run sends its view again and again; a run
    whose learning rates are zero re-renders it as often but never sends it again."""
    require_browser()
    counts = {}
    browser = Browser(WIDTH, HEIGHT)
    try:
        for name, extra in (("learning", ""), ("frozen", FROZEN)):
            trainer = build(tmp_path, name, trained_ply,
                            "default_hooks:\n  viewer: {port: 0, refresh: 0.1, paused: true}\n" + extra)
            trainer.register_hook(Slow(0.01))
            viewer = next(h for h in trainer.hooks.hooks if isinstance(h, ViewerHook))
            errors: list = []
            thread = threading.Thread(target=lambda: _train(trainer, errors), daemon=True)
            thread.start()
            wait_until(lambda: viewer.server is not None and viewer.server.paused, what="the viewer to start paused")
            browser.open(viewer.server.url)
            wait_until(lambda: viewer.service.images_sent > 0, what="the first image")
            refreshes, sent = viewer.service.refreshes, viewer.service.refreshes_sent
            viewer.resume()  # refreshes are counted apart from the renders the browser's camera changes ask for
            thread.join(timeout=120)
            assert not thread.is_alive() and not errors, errors
            counts[name] = (viewer.service.refreshes - refreshes, viewer.service.refreshes_sent - sent)
    finally:
        browser.close()
    refreshes, sent = counts["learning"]
    assert refreshes >= 5 and sent >= 3, counts  # the training changes the view visibly
    refreshes, sent = counts["frozen"]
    assert refreshes >= 5 and sent == 0, counts


def test_view_command_shows_a_ply_and_saves_the_view(tmp_path, trained_ply):
    require_browser()
    out = tmp_path / "views"
    process = subprocess.Popen(
        [sys.executable, "-m", "splattrain", "view", str(trained_ply), "--port", "0", "--out", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        line = process.stdout.readline()
        match = re.search(r"viewer: (http://\S+)", line)
        assert match, line
        browser = Browser(WIDTH, HEIGHT)
        try:
            browser.open(match.group(1))
            wait_until(lambda: _scene_shown(browser), what="the PLY's render")
            assert "Gaussians" in browser.text()
            browser.click("Save view as PNG")
            saved = wait_until(lambda: sorted(out.glob("view_*.png")), what="the saved PNG")
            image = np.asarray(Image.open(saved[0]).convert("RGB"))
            assert max(image.shape[:2]) == 512 and image.std() > 10
        finally:
            browser.close()
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, output
    assert "Traceback" not in output


def _train(trainer: DefaultTrainer, errors: list) -> None:
    try:
        trainer.train()
    except BaseException as err:  # reported by the test thread
        errors.append(err)


def _scene_shown(browser: Browser):
    """The screenshot once the middle of the canvas shows something other than a flat colour."""
    shot = browser.screenshot()
    middle = shot[HEIGHT // 4: 3 * HEIGHT // 4, WIDTH // 4: WIDTH // 2]
    return shot if middle.std() > 12 else None


def _reference(trainer: DefaultTrainer, camera) -> np.ndarray:
    """The run's own render of ``camera`` at the canvas height, as uint8."""
    scaled = camera.scaled(HEIGHT / camera.height)
    with torch.no_grad():
        result = trainer.renderer.render(trainer.model, [scaled], 1, trainer.background)
    image = (result.rgb[0].clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    return _crop(image)


def _square(shot: np.ndarray) -> np.ndarray:
    """The centred HEIGHT x HEIGHT part of the canvas (the square test camera's view)."""
    left = (WIDTH - HEIGHT) // 2
    return _crop(shot[:HEIGHT, left: left + HEIGHT])


def _crop(square: np.ndarray) -> np.ndarray:
    # Leave out what the page draws over the canvas: a notification at the top left, the panel at the right.
    return square[200:HEIGHT, 120:450]


def _save_docs_screenshot(shot: np.ndarray) -> None:
    target = os.environ.get("SPLATTRAIN_DOCS_SCREENSHOT")
    if target:
        Image.fromarray(shot).save(REPO / target)
