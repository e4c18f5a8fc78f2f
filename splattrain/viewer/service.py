"""Rendering the browsers' views on the thread that owns the scene, within a time budget."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from ..files import NotARegularFileError, OutputFolder
from ..io.atomic import atomic_write_bytes
from ..io.png import png_bytes
from ..model.gaussians import GaussianModel
from ..render import Renderer
from .camera import ViewPose, pose_to_camera
from .images import view_image, visibly_changed
from .requests import ViewRequest
from .server import ViewerServer


class RenderBudget:
    """Keeps viewer renders within ``1 - share`` of the time: every second of training earns
    ``(1 - share) / share`` seconds of rendering, and a render spends what it took.

    The credit is capped at ``cap`` seconds so a long quiet spell does not become a burst.
    """

    def __init__(self, share: float, cap: float = 0.25) -> None:
        self.share = share
        self.cap = cap
        self.credit = 0.0

    def earn(self, train_seconds: float) -> None:
        share = min(1.0, max(0.05, self.share))
        self.credit = min(self.cap, self.credit + train_seconds * (1.0 - share) / share)

    @property
    def available(self) -> bool:
        return self.share < 1.0 and self.credit > 0.0

    def spend(self, seconds: float) -> None:
        self.credit -= seconds


class ViewService:
    """Renders what the browsers ask for with ``renderer`` and sends it back.

    Every render takes :attr:`lock` and runs under ``torch.no_grad()`` on the calling thread; it
    draws no random numbers and changes no parameter, so it never alters a training run.

    Args:
        server: the page.
        renderer: the scene's renderer (the run's own while training).
        background: [3] background colour.
        png_dir: where "save view as PNG" writes.
        log: receives one line per saved PNG.
    """

    def __init__(self, server: ViewerServer, renderer: Renderer, background: torch.Tensor, png_dir: Path,
                 log: Optional[Callable[[str], None]] = None) -> None:
        self.server = server
        self.renderer = renderer
        self.background = background
        self.png_dir = Path(png_dir)
        self.log = log
        self.lock = threading.Lock()
        self.renders = 0
        self.render_seconds = 0.0
        self.images_sent = 0
        self.refreshes = 0  # renders of a still view (while training)
        self.refreshes_sent = 0  # those sent because the view changed visibly
        self._png_count = 0

    def render_pose(self, model: GaussianModel, sh_degree: int, pose: ViewPose, mode: str,
                    resolution: int) -> np.ndarray:
        """The view from ``pose`` as uint8 [H, W, 3]."""
        camera = pose_to_camera(pose, resolution).to(self.background.device)
        with self.lock, torch.no_grad():
            result = self.renderer.render(model, [camera], sh_degree, self.background, depth=mode == "depth")
            return view_image(result, mode)

    def serve_one(self, model: GaussianModel, sh_degree: int, refresh_after: Optional[float] = None) -> float:
        """Render and send the next waiting view (see :meth:`ViewerServer.next_request`);
        returns the seconds it took (0 when nobody waited). A refresh whose image did not change
        visibly is not sent: each image costs the browser a redraw of its whole page."""
        request = self.server.next_request(refresh_after)
        if request is None:
            return 0.0
        started = time.perf_counter()
        try:
            image = self.render_pose(model, sh_degree, request.pose, request.mode, request.resolution)
        except Exception as err:  # a view that cannot be rendered never stops the run: one warning, no image
            self.server.drop(request)
            self.server.warn_once(f"render:{type(err).__name__}",
                                  f"viewer: a view could not be rendered and was skipped ({type(err).__name__}: "
                                  f"{str(err)[:200]})")
            return time.perf_counter() - started
        self.refreshes += request.refresh
        if request.refresh and not visibly_changed(request.shown, image):
            self.server.keep(request)
        else:
            self.images_sent += 1
            self.refreshes_sent += request.refresh
            if self.server.send(request, image):
                try:
                    self._save_png(request, image)
                except OSError as err:
                    from ..errors import describe_os_error

                    self.server.warn_once(f"png:{err.errno}", f"viewer: the view was not saved: {describe_os_error(err)}")
                except NotARegularFileError as err:  # a link where views go: refused, never written through
                    self.server.warn_once("png:link", f"viewer: the view was not saved: {err}")
        seconds = time.perf_counter() - started
        self.renders += 1
        self.render_seconds += seconds
        return seconds

    def serve_waiting(self, model: GaussianModel, sh_degree: int, max_seconds: float = 0.5) -> float:
        """Serve every browser whose view changed, for at most about ``max_seconds``."""
        total = 0.0
        for _ in range(max(1, self.server.num_clients)):
            seconds = self.serve_one(model, sh_degree)
            total += seconds
            if seconds == 0.0 or total >= max_seconds:
                break
        return total

    def _save_png(self, request: ViewRequest, image: np.ndarray) -> None:
        self._png_count += 1
        name = f"view_{time.strftime('%Y%m%d_%H%M%S')}_{self._png_count:03d}_{request.mode}.png"
        path = OutputFolder(self.png_dir.parent, self.png_dir.name).file(name)
        data = png_bytes(image)
        atomic_write_bytes(path, lambda f: f.write(data))
        if self.log is not None:
            self.log(f"viewer: saved {path}")
        self.server.notify(request.client_id, "View saved", str(path))
        self.server.offer_download(request.client_id, path.name, data)
