"""Open the viewer's page on a scene: the one launch ``splattrain view`` and ``ViewerHook`` share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from ..console import Console
from ..data.types import Frame
from ..render.base import Renderer
from .server import ViewerServer, ViewerSettings
from .service import ViewService
from .session import add_scene_cameras


@dataclass
class Viewer:
    """A running page (``server``) and what renders for it (``service``; None for a page that
    shows only meshes)."""

    server: ViewerServer
    service: Optional[ViewService]

    def close(self) -> None:
        """Stop serving the page."""
        self.server.close()


def open_viewer(console: Console, name: str, renderer: Optional[Renderer], background: torch.Tensor, png_dir: Path,
                host: str = "127.0.0.1", port: int = 8080, training: bool = False,
                settings: Optional[ViewerSettings] = None, allow_origins: Sequence[str] = (),
                train: Sequence[Frame] = (), test: Sequence[Frame] = (), scene_scale: float = 1.0,
                thumbnails: bool = True, note: str = "") -> Viewer:
    """Serve the page titled after ``name`` on ``host:port`` (a taken port is named in one line),
    drawing the ``train`` / ``test`` cameras when there are any, and say where it is (``note``
    follows the address). Without a ``renderer`` the page has no render controls (a mesh alone)."""
    server = ViewerServer(host, port, title=f"splattrain: {name}", training=training, settings=settings,
                          allow_origins=allow_origins, warn=console.warning, renders=renderer is not None)
    try:
        service = None if renderer is None else ViewService(server, renderer, background, png_dir, log=console.info)
        if train or test:
            add_scene_cameras(server, train, test, scene_scale, thumbnails, background.tolist())
    except BaseException:
        server.close()
        raise
    if server.port != port and port != 0:
        console.warning(f"viewer port {port} was taken; using {server.port}")
    console.info(f"viewer: [bold]{server.url}[/bold]  {note}(from another machine: "
                 f"ssh -L {server.port}:localhost:{server.port} <this host>)", markup=True)
    return Viewer(server, service)
