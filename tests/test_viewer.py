"""The viewer without a browser: cameras, the hook's pause / resume, renders, ports, Ctrl-C."""

from __future__ import annotations

import math
import signal
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import DEMO, tiny_config_text
from splattrain.checkpoints.files import load_checkpoint_file
from splattrain.cli import main
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.data.blender import load_blender
from splattrain.engine import DefaultTrainer
from splattrain.errors import UserError
from splattrain.hooks import Hook, ViewerHook
from splattrain.io.ply import write_ply
from splattrain.model.gaussians import GaussianModel
from splattrain.viewer.camera import camera_pose, image_size, pose_to_camera
from splattrain.viewer.requests import MOTION_GAP, ViewQueue, ViewRequest, motion_resolution
from splattrain.viewer.images import VISIBLE_LEVELS, VISIBLE_SHARE, colorize_depth, view_image, visibly_changed
from test_run_safety import start_fit, wait_for_line


def build(tmp_path: Path, steps: int, extra: str = "", name: str = "run") -> DefaultTrainer:
    text = tiny_config_text(tmp_path, steps=steps, extra=extra).replace(str(tmp_path / "run"), str(tmp_path / name))
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return DefaultTrainer(load_config(path), console=Console(quiet=True))


def viewer_of(trainer: DefaultTrainer) -> ViewerHook:
    return next(h for h in trainer.hooks.hooks if isinstance(h, ViewerHook))


def busy_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock


def test_browser_pose_round_trips_a_dataset_camera():
    trainer_cam = _demo_camera()
    pose = camera_pose(trainer_cam)
    again = pose_to_camera(pose, max(trainer_cam.width, trainer_cam.height))
    assert (again.width, again.height) == (trainer_cam.width, trainer_cam.height)
    assert torch.allclose(again.viewmat, trainer_cam.viewmat, atol=1e-5)
    assert torch.allclose(again.K, trainer_cam.K, rtol=1e-5)
    assert image_size(16 / 9, 10_000) == (2048, 1152) and image_size(0.5, 1) == (32, 64)


def test_render_modes_and_depth_colours():
    depth = np.tile(np.linspace(1.0, 3.0, 8, dtype=np.float32), (4, 1))
    alpha = np.ones_like(depth)
    alpha[0, 0] = 0.0
    colours = colorize_depth(depth, alpha)
    assert colours.dtype == np.uint8 and colours.shape == (4, 8, 3)
    assert (colours[0, 0] == 0).all()  # uncovered: black
    assert colours[1, 0, 2] > colours[1, 0, 0] and colours[1, -1, 0] > colours[1, -1, 2]  # near blue, far yellow
    with pytest.raises(ValueError):
        view_image(None, "normals")  # type: ignore[arg-type]


def test_visibly_changed_counts_pixels_moved_by_more_than_a_few_levels():
    before = np.full((100, 100, 3), 128, dtype=np.uint8)
    after = before.copy()
    assert visibly_changed(None, after) and visibly_changed(before[:50], after)
    after[:, :, 1] += VISIBLE_LEVELS  # every pixel, but by no more than the threshold
    assert not visibly_changed(before, after)
    limit = int(VISIBLE_SHARE * before.shape[0] * before.shape[1])  # pixels that may change by more
    after.reshape(-1, 3)[:limit, 0] += VISIBLE_LEVELS + 1
    assert not visibly_changed(before, after)
    after.reshape(-1, 3)[limit, 2] -= VISIBLE_LEVELS + 1  # one more
    assert visibly_changed(before, after)


def test_view_queue_drags_coarse_then_sharp_and_refreshes_still_views():
    views, image = ViewQueue(), np.zeros((4, 4, 3), dtype=np.uint8)
    views.add(1)
    views.add(2)
    for client in (1, 2):  # a new browser wants its first image
        request = views.next("rgb", 512, now=10.0)
        assert (request.client_id, request.resolution, request.refresh, request.coarse) == (client, 512, False, False)
        assert views.sent(request, image, now=10.0) is False
    assert views.next("rgb", 512, now=10.1) is None  # nothing changed, no refresh asked for

    views.camera_moved(1, now=11.0)  # one change: a jump, at the full resolution
    request = views.next("rgb", 512, now=11.0)
    assert request.resolution == 512 and not request.coarse
    views.sent(request, image, now=11.01)
    views.camera_moved(1, now=11.05)  # a second change soon after: a drag, at half the resolution
    request = views.next("rgb", 512, now=11.05)
    assert request.client_id == 1 and request.coarse and request.resolution == motion_resolution(512) == 256
    views.sent(request, image, now=11.06)
    assert views.next("rgb", 512, now=11.05 + 0.9 * MOTION_GAP) is None  # the drag may go on
    request = views.next("rgb", 512, now=11.05 + MOTION_GAP)  # it stopped: the sharp image follows
    assert request.client_id == 1 and request.resolution == 512 and not request.coarse
    views.sent(request, image, now=11.4)

    assert views.next("rgb", 512, refresh_after=5.0, now=14.0) is None
    request = views.next("rgb", 512, refresh_after=5.0, now=15.2)  # the view served longest ago
    assert request.client_id == 2 and request.refresh and request.shown is image
    views.kept(request, now=15.2)
    assert views.next("rgb", 512, refresh_after=5.0, now=16.3) is None
    assert views.next("rgb", 512, refresh_after=5.0, now=16.5).client_id == 1

    views.camera_moved(2, now=20.0)
    request = views.next("rgb", 512, now=20.0)
    views.camera_moved(2, now=20.05)  # while its image is rendered: not lost
    assert views.sent(request, image, now=20.1) is False
    request = views.next("rgb", 512, now=20.1)
    assert request.client_id == 2 and request.coarse
    views.want_png(2)  # pressed while a coarse image is rendered: the PNG waits for a full one
    assert views.sent(request, image, now=20.15) is False
    request = views.next("rgb", 512, now=20.2)
    assert request.client_id == 2 and not request.coarse and views.sent(request, image, now=20.2) is True
    views.remove(1)
    assert len(views) == 1 and views.sent(ViewRequest(1, None, "rgb", 64), image) is None
    assert motion_resolution(64) == 64

    # a view showing a drag's coarse image is not a still view: no refresh compares against it, the
    # full resolution follows the drag
    views.camera_moved(2, now=30.0)
    views.sent(views.next("rgb", 512, now=30.0), image, now=30.0)
    views.camera_moved(2, now=30.05)
    request = views.next("rgb", 512, now=30.05)
    assert request.coarse and views.sent(request, image, now=30.06) is False
    assert views.next("rgb", 512, refresh_after=0.01, now=30.2) is None
    request = views.next("rgb", 512, refresh_after=0.01, now=30.05 + MOTION_GAP)
    assert not request.refresh and not request.coarse and request.resolution == 512


def test_default_hooks_viewer_is_off_until_named_and_names_a_busy_port(tmp_path):
    assert not any(isinstance(h, ViewerHook) for h in build(tmp_path, 5).hooks.hooks)
    trainer = build(tmp_path, 5, "default_hooks:\n  viewer: {port: 0}\n")
    assert viewer_of(trainer).port == 0 and viewer_of(trainer).refresh == 10.0
    with pytest.raises(UserError, match="ViewerHook refresh 0"):
        build(tmp_path, 5, "default_hooks:\n  viewer: {port: 0, refresh: 0}\n")
    with busy_port() as sock:
        port = sock.getsockname()[1]
        cfg = tmp_path / "busy.yaml"
        cfg.write_text(tiny_config_text(tmp_path, steps=5))
        assert main(["fit", "--config", str(cfg), "--viewer", str(port)]) == 2


def test_busy_port_is_one_line_exit_2(tmp_path, capsys):
    with busy_port() as sock:
        port = sock.getsockname()[1]
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text(tiny_config_text(tmp_path, steps=5))
        assert main(["fit", "--config", str(cfg), "--viewer", str(port)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"port {port}" in err[0] and "in use" in err[0]
        ply = tmp_path / "scene.ply"
        write_ply(ply, GaussianModel.random(50, torch.zeros(3), 1.0, 0).params)
        assert main(["view", str(ply), "--port", str(port)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"port {port}" in err[0]
    assert main(["view", str(tmp_path / "missing.ply")]) == 2
    assert "missing.ply" in capsys.readouterr().err


class Trace(Hook):
    """Records, per step, whether a viewer render ran outside the lock or inside a step."""

    priority = 10

    def __init__(self, viewer: ViewerHook, pause_at: int = 0, resume_after: float = 0.3) -> None:
        super().__init__()
        self.viewer, self.pause_at, self.resume_after = viewer, pause_at, resume_after
        self.in_step = False
        self.bad_renders = 0
        self.renders = 0
        self.paused_steps = []

    def before_run(self, trainer):
        renderer = trainer.renderer
        original = renderer.render

        def spy(model, cameras, *args, **kwargs):
            if cameras[0].name == "viewer":
                self.renders += 1
                if self.in_step or not self.viewer.service.lock.locked():
                    self.bad_renders += 1
            return original(model, cameras, *args, **kwargs)

        renderer.render = spy

    def before_train_iter(self, trainer, step, batch):
        self.in_step = True

    def after_train_iter(self, trainer, step, batch, outputs):
        self.in_step = False
        if step == self.pause_at:
            self.viewer.pause()
            pose = camera_pose(trainer.data.train_cameras[0])
            for mode in ("rgb", "depth", "alpha"):  # a browser's renders during the pause
                image = self.viewer.service.render_pose(trainer.model, outputs["sh_degree"], pose, mode, 96)
                assert image.shape == (96, 96, 3) and image.std() > 0
            threading.Timer(self.resume_after, self.viewer.resume).start()


def test_pause_and_viewer_renders_leave_the_run_bit_identical(tmp_path):
    plain = build(tmp_path, 25, name="plain")
    plain.train()
    watched = build(tmp_path, 25, "default_hooks:\n  viewer: {port: 0}\n", name="watched")
    viewer = viewer_of(watched)
    trace = Trace(viewer, pause_at=10)
    watched.register_hook(trace)
    started = time.perf_counter()
    watched.train()
    assert time.perf_counter() - started >= 0.3  # it did wait for resume
    assert trace.renders == 3 and trace.bad_renders == 0
    assert viewer.paused_seconds >= 0.25 and watched.train_seconds < time.perf_counter() - started - 0.25
    for name, value in plain.model.params.items():
        assert torch.equal(value, watched.model.params[name]), name
    status = viewer.status()
    assert status["step"] == 25 and not status["paused"] and status["gaussians"] == watched.model.num_gaussians
    assert status["clients"] == 0 and status["url"].startswith("http://127.0.0.1:")
    assert math.isfinite(status["ema_loss"])
    # the engine's readings: the loss average the log writes, the step rate of its clock
    assert status["ema_loss"] == float(watched.loss_average)
    assert status["steps_per_second"] == watched.clock.steps_per_second > 0


def test_save_checkpoint_request_saves_between_steps(tmp_path):
    trainer = build(tmp_path, 8, "default_hooks:\n  viewer: {port: 0}\n  checkpoint: {interval: 0, save_last: false}\n")
    viewer = viewer_of(trainer)

    class Press(Hook):
        def after_train_iter(self, trainer, step, batch, outputs):
            if step == 3:
                viewer.server.request_save()

    trainer.register_hook(Press())
    trainer.train()
    saved = sorted((tmp_path / "run" / "ckpt").glob("step_*.pt"))
    assert [p.name for p in saved] == ["step_000003.pt"]
    assert load_checkpoint_file(saved[0])["step"] == 3


def test_ctrl_c_while_paused_saves_and_exits_130(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, steps=200, extra="default_hooks:\n  viewer: {port: 0, paused: true}\n"))
    process = start_fit(cfg)
    wait_for_line(process, "viewer: paused at step 0")
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 130, output
    assert "saved a resumable checkpoint" in output and "Traceback" not in output
    assert load_checkpoint_file(tmp_path / "run" / "ckpt" / "last.pt")["step"] == 1


def _demo_camera():
    return load_blender(DEMO).test[0].camera


def test_example_config_builds_the_viewer(capsys):
    from conftest import REPO

    assert main(["fit", "--config", str(REPO / "configs" / "demo_viewer.yaml"), "--dry-run",
                 "default_hooks.viewer.port=0"]) == 0
    assert "ViewerHook" in capsys.readouterr().out
    assert main(["fit", "--config", str(REPO / "configs" / "demo_viewer.yaml"), "--viewer", "oops"]) == 2
    assert "--viewer 'oops'" in capsys.readouterr().err


def test_view_loads_a_run_with_its_cameras_a_checkpoint_and_a_ply(tmp_path):
    from splattrain.commands.view import load_viewed_scene, parse_background, points_overview_pose

    trainer = build(tmp_path, 4)
    trainer.train()
    console = Console(quiet=True)
    run = load_viewed_scene(tmp_path / "run", console)
    assert run.step == 4 and len(run.train) == 48 and len(run.test) == 10
    assert run.png_dir == tmp_path / "run" / "viewer" and run.model.num_gaussians == trainer.model.num_gaussians
    ply = load_viewed_scene(tmp_path / "run" / "ply" / "step_000004.ply", console, background="black")
    assert ply.train == [] and ply.background.tolist() == [0.0, 0.0, 0.0]
    for name, value in trainer.model.params.items():
        assert torch.equal(ply.model.params[name], value.detach()), name
    pose = points_overview_pose(ply.model.params["means"])
    camera = pose_to_camera(pose, 64)
    centre = torch.from_numpy(np.median(ply.model.params["means"].detach().numpy(), axis=0)).float()
    in_view = camera.viewmat[:3, :3] @ centre + camera.viewmat[:3, 3]
    assert in_view[2] > 0 and abs(float(in_view[0])) < 1e-3 and abs(float(in_view[1])) < 1e-3  # looks at it
    assert parse_background("0.5,0.5,1") == [0.5, 0.5, 1.0]
    with pytest.raises(UserError):
        parse_background("red")
    with pytest.raises(UserError):
        load_viewed_scene(tmp_path / "nothing.ply", console)


def test_missing_viser_is_one_line_naming_the_package(tmp_path, monkeypatch, capsys):
    import sys

    for name in [m for m in sys.modules if m == "viser" or m.startswith("viser.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "viser", None)  # import viser raises ImportError
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, steps=5))
    assert main(["fit", "--config", str(cfg), "--viewer", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "viser" in err[0] and "splattrain[viewer]" in err[0]


def test_paused_time_counts_in_neither_rate_nor_eta(monkeypatch):
    import types

    from splattrain import console
    from splattrain.console import ProgressLogger

    clock = [1000.0]  # a clock the test moves: the rate depends on no real time
    monkeypatch.setattr(console, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    with ProgressLogger(Console(quiet=True), total=100) as progress:
        clock[0] += 0.05  # training
        progress.set_paused(True, 0)
        clock[0] += 30.0  # paused
        progress.set_paused(False, 0)
        clock[0] += 0.05  # training
        assert progress.rate(10) == pytest.approx(100.0)  # 10 steps in the 0.1 s not paused (30.1 s: 0.33/s)


def test_cameras_option_starts_with_the_frustums_hidden_and_the_checkbox_shows_them(tmp_path):
    trainer = build(tmp_path, 2, "default_hooks:\n  viewer: {port: 0, cameras: false}\n")
    viewer = viewer_of(trainer)
    seen = {}

    class Look(Hook):
        def after_train_iter(self, trainer, step, batch, outputs):
            if step == 1:
                handles = viewer.server.camera_handles
                seen["start"] = (len(handles), viewer.server.cameras_control.value, any(h.visible for h in handles))
                viewer.server.cameras_control.value = True
                viewer.server.show_cameras(True)
                seen["shown"] = all(h.visible for h in handles)

    trainer.register_hook(Look())
    trainer.train()
    assert seen["start"] == (58, False, False) and seen["shown"]


def test_view_opens_a_mesh_ply_and_shows_it_with_a_checkbox(tmp_path):
    from splattrain.commands.view import load_viewed_scene, points_overview_pose
    from splattrain.mesh.files import MeshArrays, write_mesh
    from splattrain.viewer.server import ViewerServer

    vertices = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], np.float32) + 5.0
    faces = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]], np.int32)
    write_mesh(tmp_path / "m.ply", MeshArrays(vertices, faces, np.full((4, 3), 200, np.uint8)))
    scene = load_viewed_scene(tmp_path / "m.ply", Console(quiet=True))
    assert scene.model is None and scene.renderer is None and scene.mesh is not None
    np.testing.assert_array_equal(scene.mesh.faces, faces)
    camera = pose_to_camera(points_overview_pose(scene.mesh.vertices), 64)
    centre = torch.from_numpy(np.median(vertices, axis=0))
    in_view = camera.viewmat[:3, :3] @ centre + camera.viewmat[:3, 3]
    assert in_view[2] > 0 and abs(float(in_view[0])) < 1e-3 and abs(float(in_view[1])) < 1e-3

    server = ViewerServer(port=0, training=False, renders=False)
    try:
        assert not hasattr(server, "png_button")  # nothing to render: no render controls
        server.add_mesh(scene.mesh.vertices, scene.mesh.faces, scene.mesh.colors)
        assert server.mesh_handle is not None and server.mesh_handle.visible
        server.mesh_control.value = False
        server.show_mesh(False)
        assert not server.mesh_handle.visible
    finally:
        server.close()
