"""The viewer's web page (viser): controls, camera frustums, stats, and per-browser view requests.

viser calls the callbacks here on its own threads. They only record what the browser asked
for (a new camera, pause, a checkpoint, a PNG); the thread that owns the scene (the training
loop, or ``splattrain view``'s main loop) reads the requests, renders, and sends the images.
No tensor is touched on viser's threads.
"""

from __future__ import annotations

import contextlib
import errno
import io
import math
import socket
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..cameras import Camera
from ..errors import UserError
from .camera import (MAX_RESOLUTION, MIN_RESOLUTION, ViewPose, camera_pose, mean_up_direction, overview_pose,
                     pose_problem, quat_to_matrix)
from .guard import BrowserErrorFilter, origin_checked_serve, setting_value
from .images import RENDER_MODES
from .requests import ViewQueue, ViewRequest

DEFAULT_RESOLUTION = 512
DEFAULT_TRAIN_SHARE = 0.9
DEFAULT_REFRESH = 10.0
FRUSTUM_LINE_PIXELS = 1.5  # frustum lines in screen pixels: a software-drawn page redraws them 1.6x cheaper than
# lines of a world-space width (which are drawn as meshes)


class ViewerError(UserError):
    """The viewer cannot start (port taken, package missing)."""


def import_viser():
    """The viser module, or a one-line error naming what to install."""
    try:
        import viser
    except ImportError:
        raise ViewerError("the viewer needs the 'viser' package: pip install 'splattrain[viewer]'") from None
    return viser


def check_port_free(host: str, port: int) -> None:
    """Raise ViewerError naming ``host:port`` when something already listens there."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ViewerError(f"viewer port {port!r}: use a TCP port in 0..65535 (0: any free port)")
    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise ViewerError(f"viewer port {port} on {host} is already in use; choose another with --viewer PORT "
                                  "(or default_hooks.viewer.port)") from None
            raise ViewerError(f"viewer cannot listen on {host}:{port}: {err.strerror}") from None


@dataclass
class ViewerSettings:
    """What the browser controls set."""

    mode: str = "rgb"
    resolution: int = DEFAULT_RESOLUTION
    train_share: float = DEFAULT_TRAIN_SHARE
    refresh: float = DEFAULT_REFRESH  # seconds between re-renders of a still view while training
    show_cameras: bool = True


@dataclass
class CameraGroup:
    """Cameras to draw as frustums (e.g. the train or test views)."""

    name: str
    cameras: Sequence[Camera]
    images: Optional[Sequence[np.ndarray]] = None  # thumbnails, uint8 HxWx3
    color: Tuple[int, int, int] = (40, 90, 200)
    handles: List[object] = field(default_factory=list)


class ViewerServer:
    """A viser server with splattrain's page.

    Args:
        host, port: where to listen (port 0: any free port).
        title: shown at the top of the control panel.
        training: show Pause / Resume / "save checkpoint" (a live run) instead of a finished scene.
        renders: show the render controls (False: a page that only shows meshes, nothing to render).
        settings: initial control values.
        allow_origins: web origins (``http(s)://host[:port]``, ``*`` for any) whose pages may use
            the viewer besides its own page (see :mod:`splattrain.viewer.guard`).
        warn: receives one line for each kind of request a browser sent that was refused.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 8080, title: str = "splattrain",
                 training: bool = True, settings: Optional[ViewerSettings] = None,
                 allow_origins: Sequence[str] = (), warn: Optional[Callable[[str], None]] = None,
                 renders: bool = True) -> None:
        viser = import_viser()
        check_port_free(host, port)
        self.host = host
        self.settings = settings or ViewerSettings()
        self.training = training
        self.renders = renders
        self.mesh_handle: Optional[object] = None
        self._warn = warn
        self._warned: set = set()
        self.refused_origins: List[str] = []
        self._error_filter = BrowserErrorFilter(self.warn_once).install()
        with _quiet(), origin_checked_serve(list(allow_origins), self._refused) as checked:
            self.server = viser.ViserServer(host=host, port=port, label=title, verbose=False)
        if not checked:
            self.close()
            raise ViewerError(f"viser {viser.__version__} starts its server in a way splattrain cannot check the "
                              "origin of connections in; install viser 1.1")
        # No share-URL button: it would open a tunnel through a public relay.
        self.server.gui.configure_theme(show_share_button=False, control_width="medium")
        self.port = int(self.server.get_port())
        self.requested_port = port
        self.views = ViewQueue()
        self._paused = threading.Event()
        self.wake = threading.Event()  # set whenever the browser asks for something
        self.save_requested = False
        self._initial_pose: Optional[ViewPose] = None
        self._groups: List[CameraGroup] = []
        self._closed = False
        self._build_gui()
        self.server.on_client_connect(self._on_connect)
        self.server.on_client_disconnect(self._on_disconnect)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    # -- page ------------------------------------------------------------------------
    def _build_gui(self) -> None:
        gui = self.server.gui
        self.stats = gui.add_markdown("waiting for the first step" if self.training else "")
        if not self.renders:
            return
        if self.training:
            self.pause_button = gui.add_button("Pause", icon="player-pause", hint="stop training between two steps")
            self.resume_button = gui.add_button("Resume", icon="player-play", disabled=True, hint="continue training")
            self.save_button = gui.add_button("Save checkpoint now", icon="device-floppy")
            self.pause_button.on_click(lambda _: self.set_paused(True))
            self.resume_button.on_click(lambda _: self.set_paused(False))
            self.save_button.on_click(lambda _: self.request_save())
        self.png_button = gui.add_button("Save view as PNG", icon="photo", hint="render the current view and save it")
        self.png_button.on_click(self._on_png)
        with gui.add_folder("View"):
            self.mode_control = gui.add_dropdown("Render mode", RENDER_MODES, initial_value=self.settings.mode)
            self.resolution_control = gui.add_slider(
                "Resolution", MIN_RESOLUTION, MAX_RESOLUTION, 32, int(self.settings.resolution),
                hint="pixels on the long side of the rendered image",
            )
            if self.training:
                self.share_control = gui.add_slider(
                    "Training share", 0.1, 1.0, 0.05, float(self.settings.train_share),
                    hint="viewer renders take at most the rest of the time (1.0: render only while paused)",
                )
                self.share_control.on_update(lambda _: self._set("train_share", self.share_control.value))
                self.refresh_control = gui.add_slider(
                    "Still view refresh", 0.1, max(60.0, self.settings.refresh), 0.1, float(self.settings.refresh),
                    hint="seconds between new images of a still view while training (sent when it changed visibly); "
                         "each image costs a browser without a GPU about a third of a CPU core-second",
                )
                self.refresh_control.on_update(lambda _: self._set("refresh", self.refresh_control.value))
            self.cameras_control = gui.add_checkbox("Show cameras", self.settings.show_cameras)
        self.mode_control.on_update(lambda _: self._set("mode", self.mode_control.value))
        self.resolution_control.on_update(lambda _: self._set("resolution", self.resolution_control.value))
        self.cameras_control.on_update(lambda _: self.show_cameras(bool(self.cameras_control.value)))

    def _set(self, name: str, value: object) -> None:
        """A control changed: keep the value when it is one of the control's choices or within its
        range, else put the control back (one warning for each control)."""
        accepted = setting_value(name, value)
        if accepted is None:
            self.warn_once(f"setting:{name}", f"viewer: ignored {name.replace('_', ' ')} {str(value)[:80]!r} "
                                              "from a browser (not one of the control's values)")
            control = {"mode": "mode_control", "resolution": "resolution_control", "train_share": "share_control",
                       "refresh": "refresh_control"}[name]
            getattr(self, control).value = getattr(self.settings, name)
            return
        if getattr(self.settings, name) == accepted:
            return
        setattr(self.settings, name, accepted)
        if name not in ("train_share", "refresh"):
            self.mark_all_dirty()

    def warn_once(self, key: str, message: Optional[str] = None) -> None:
        """Pass ``message`` (``key`` when None) to ``warn`` the first time ``key`` is seen."""
        if key in self._warned or len(self._warned) >= 100:
            return
        self._warned.add(key)
        if self._warn is not None:
            self._warn(message or key)

    def _refused(self, origin: str) -> None:
        self.refused_origins.append(origin[:200])
        self.warn_once(f"origin:{origin[:200]}", f"viewer: refused a connection from a page at {origin[:200]!r} "
                       "(not this viewer's own page; default_hooks.viewer.allow_origins / --allow-origin "
                       "admit other origins)")

    def add_cameras(self, group: CameraGroup, scale: float) -> None:
        """Draw ``group`` as frustums of size ``scale``; clicking one moves that browser's view to it."""
        for index, camera in enumerate(group.cameras):
            pose = camera_pose(camera)
            image = group.images[index] if group.images is not None else None
            handle = self.server.scene.add_camera_frustum(
                f"/cameras/{group.name}/{index:04d}", fov=pose.fov, aspect=pose.aspect, scale=scale,
                wxyz=pose.wxyz, position=pose.position, image=image, color=group.color,
                visible=self.settings.show_cameras, thickness=FRUSTUM_LINE_PIXELS, thickness_units="screen",
            )
            handle.on_click(lambda event, pose=pose: self.look_through(event.client_id, pose))
            group.handles.append(handle)
        self._groups.append(group)

    def add_mesh(self, vertices: np.ndarray, faces: np.ndarray, colors: np.ndarray) -> None:
        """Show a triangle mesh (float [V, 3], int [F, 3], uint8 [V, 3] vertex colours) in the scene,
        drawn by the browser over the rendered splat, with a "Show mesh" checkbox."""
        import trimesh  # a dependency of viser

        mesh = trimesh.Trimesh(vertices=vertices, faces=faces, vertex_colors=colors, process=False)
        self.mesh_handle = self.server.scene.add_mesh_trimesh("/mesh", mesh)
        self.mesh_control = self.server.gui.add_checkbox("Show mesh", True)
        self.mesh_control.on_update(lambda _: self.show_mesh(bool(self.mesh_control.value)))

    def show_mesh(self, visible: bool) -> None:
        if self.mesh_handle is not None:
            self.mesh_handle.visible = visible  # type: ignore[attr-defined]

    @property
    def camera_handles(self) -> list:
        """The frustums drawn, every group's in order."""
        return [handle for group in self._groups for handle in group.handles]

    def show_cameras(self, visible: bool) -> None:
        self.settings.show_cameras = visible
        for handle in self.camera_handles:
            handle.visible = visible

    def set_initial_view(self, pose: ViewPose, up: Optional[np.ndarray] = None) -> None:
        """Where a newly connected browser looks from; ``up`` is the world's up direction."""
        self._initial_pose = pose
        if up is not None:
            self.server.scene.set_up_direction(tuple(float(v) for v in up))

    def set_initial_cameras(self, cameras: Sequence[Camera]) -> None:
        """Start browsers behind the first camera, looking at what the cameras look at, with
        the cameras' mean up direction."""
        if cameras:
            self.set_initial_view(overview_pose(cameras), mean_up_direction(cameras))

    def look_through(self, client_id: int, pose: ViewPose) -> None:
        """Move a browser's view to a camera and hide the frustums (which would cover it)."""
        self.cameras_control.value = False
        self.show_cameras(False)
        self.move_camera(client_id, pose)

    def move_camera(self, client_id: int, pose: ViewPose) -> None:
        """Put a browser's camera at ``pose`` (its field of view included)."""
        client = self.server.get_clients().get(client_id)
        if client is None:
            return
        direction = quat_to_matrix(pose.wxyz)
        up = -direction[:, 1]
        with client.atomic():
            client.camera.fov = pose.fov
            client.camera.position = pose.position
            client.camera.look_at = np.asarray(pose.position) + direction[:, 2]
            client.camera.up_direction = up
        self.mark_dirty(client_id)

    def set_stats(self, text: str) -> None:
        """Replace the stats panel's markdown."""
        if self.stats.content != text:
            self.stats.content = text

    # -- browsers ----------------------------------------------------------------------
    def _on_connect(self, client) -> None:
        self.views.add(client.client_id)
        client.camera.on_update(lambda _camera, cid=client.client_id: self.mark_dirty(cid))
        if self._initial_pose is not None and pose_problem(self._initial_pose) is None:
            self.move_camera(client.client_id, self._initial_pose)
        self.wake.set()

    def _on_disconnect(self, client) -> None:
        self.views.remove(client.client_id)

    @property
    def num_clients(self) -> int:
        return len(self.views)

    def mark_dirty(self, client_id: int) -> None:
        """A browser's camera changed."""
        self.views.camera_moved(client_id)
        self.wake.set()

    def mark_all_dirty(self) -> None:
        self.views.settings_changed()
        self.wake.set()

    def next_request(self, refresh_after: Optional[float] = None) -> Optional[ViewRequest]:
        """The view to render next, with the browser's camera (see :meth:`ViewQueue.next`)."""
        request = self.views.next(self.settings.mode, int(self.settings.resolution), refresh_after)
        if request is None:
            return None
        request.pose = self._pose(request.client_id)
        if request.pose is None:
            return None
        problem = pose_problem(request.pose)
        if problem is not None:
            self.views.dropped(request)
            self.warn_once("pose", f"viewer: a browser asked for {problem}; "
                           "that view is not rendered")
            return None
        return request

    def drop(self, request: ViewRequest) -> None:
        """Answer a request that could not be served: nothing sent until the browser changes something."""
        self.views.dropped(request)

    def _pose(self, client_id: int) -> Optional[ViewPose]:
        client = self.server.get_clients().get(client_id)
        if client is None:
            return None
        camera = client.camera
        try:
            height = max(1, int(camera.image_height))
            w, x, y, z = (float(v) for v in camera.wxyz)
            px, py, pz = (float(v) for v in camera.position)
            return ViewPose((w, x, y, z), (px, py, pz), float(camera.fov), max(1, int(camera.image_width)) / height)
        except AssertionError:  # no camera message from this browser yet
            return None
        except (TypeError, ValueError, OverflowError):  # not numbers, or not as many as a pose has
            return ViewPose((0.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0), math.nan, 1.0)

    def send(self, request: ViewRequest, image: np.ndarray, jpeg_quality: int = 90) -> bool:
        """Show ``image`` in the browser that asked; returns True when it wanted a PNG saved too."""
        wants_png = self.views.sent(request, image)
        if wants_png is None:
            return False
        client = self.server.get_clients().get(request.client_id)
        if client is not None:
            client.scene.set_background_image(image, format="jpeg", jpeg_quality=jpeg_quality)
        return wants_png

    def keep(self, request: ViewRequest) -> None:
        """Answer a refresh request without sending: the browser's image still shows the view."""
        self.views.kept(request)

    def notify(self, client_id: Optional[int], title: str, body: str) -> None:
        """A notification in one browser (None: all)."""
        clients = self.server.get_clients()
        targets = clients.values() if client_id is None else [c for cid, c in clients.items() if cid == client_id]
        for client in targets:
            client.add_notification(title, body, auto_close_seconds=5.0)

    def offer_download(self, client_id: int, filename: str, content: bytes) -> None:
        client = self.server.get_clients().get(client_id)
        if client is not None:
            client.send_file_download(filename, content)

    def _on_png(self, event) -> None:
        self.views.want_png(event.client_id)
        self.wake.set()

    # -- pause and checkpoint ------------------------------------------------------------
    @property
    def paused(self) -> bool:
        return self._paused.is_set()

    def set_paused(self, paused: bool) -> None:
        """Pause (or resume) training; the buttons follow."""
        if paused:
            self._paused.set()
        else:
            self._paused.clear()
        if self.training:
            self.pause_button.disabled = paused
            self.resume_button.disabled = not paused
        self.wake.set()

    def request_save(self) -> None:
        """What "Save checkpoint now" does: the owner saves at its next chance."""
        self.save_requested = True
        self.wake.set()

    def take_save_request(self) -> bool:
        """True once after "save checkpoint now" was pressed."""
        requested, self.save_requested = self.save_requested, False
        return requested

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if hasattr(self, "server"):
                with _quiet():
                    self.server.stop()
            self._error_filter.remove()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def wait_for(event: threading.Event, seconds: float) -> None:
    """Wait on ``event`` at most ``seconds``, then clear it."""
    event.wait(seconds)
    event.clear()
