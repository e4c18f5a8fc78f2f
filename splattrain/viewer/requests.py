"""Which browser's view to render next, at what resolution, and whether a still view needs a new image.

A browser's camera is either moving (its changes come less than MOTION_GAP apart), jumping (one
change, e.g. to a training camera) or still. A moving camera's images are rendered at MOTION_SCALE
of the resolution, so the view follows the mouse at about four times the rate; once the camera
has been still for MOTION_GAP, the view is rendered again at the full resolution. A still view
is re-rendered only when the owner asks for a refresh (while training), and the owner sends the
result only when it changed visibly: every image makes the browser redraw its whole page.

The viewer's web threads record changes here; the thread that renders asks :meth:`ViewQueue.next`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np

from .camera import MIN_RESOLUTION, ViewPose

#: Camera changes less than this many seconds apart are one movement.
MOTION_GAP = 0.3
#: A moving camera's images are rendered at this share of the resolution (long side).
MOTION_SCALE = 0.5


def motion_resolution(resolution: int) -> int:
    """The long side of a moving camera's images."""
    return max(MIN_RESOLUTION, int(round(resolution * MOTION_SCALE)))


@dataclass
class ViewRequest:
    """One view a browser is waiting for (``pose`` is filled in by the server)."""

    client_id: int
    pose: Optional[ViewPose]
    mode: str
    resolution: int
    version: int = 0  # the browser's change count when this view was taken
    refresh: bool = False  # nothing changed in the browser: a re-render of the view it shows
    shown: Optional[np.ndarray] = None  # the image the browser shows now (refresh requests only)
    coarse: bool = False  # a moving camera's image, at the motion resolution


@dataclass
class ClientViewState:
    """What the renderer knows about one browser's view."""

    dirty: bool = True  # the camera or a setting changed since the last image
    version: int = 0  # counts the changes, so one arriving during a render is not lost
    moved_at: float = -1e9  # the camera's last change
    moving: bool = False  # its last two changes came less than MOTION_GAP apart
    served_at: float = 0.0  # when its view was last rendered (sent or found unchanged)
    shown: Optional[np.ndarray] = None  # the last image sent to it
    coarse: bool = False  # that image was rendered at the motion resolution
    png: bool = False  # "save PNG" was pressed


class ViewQueue:
    """The browsers' view states, safe to change from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: Dict[int, ClientViewState] = {}

    def __len__(self) -> int:
        return len(self._clients)

    def add(self, client_id: int) -> None:
        with self._lock:
            self._clients[client_id] = ClientViewState()

    def remove(self, client_id: int) -> None:
        with self._lock:
            self._clients.pop(client_id, None)

    def camera_moved(self, client_id: int, now: Optional[float] = None) -> None:
        """A browser's camera changed (the user drags it, or it was moved to a camera)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            state = self._clients.get(client_id)
            if state is not None:
                state.moving = now - state.moved_at < MOTION_GAP
                state.moved_at = now
                state.dirty = True
                state.version += 1

    def settings_changed(self) -> None:
        """Mode or resolution changed: every view needs a new image."""
        with self._lock:
            for state in self._clients.values():
                state.dirty = True
                state.version += 1

    def want_png(self, client_id: int) -> None:
        with self._lock:
            state = self._clients.get(client_id)
            if state is not None:
                state.png = True

    def next(self, mode: str, resolution: int, refresh_after: Optional[float] = None,
             now: Optional[float] = None) -> Optional[ViewRequest]:
        """The view to render next: one whose camera or settings changed, or whose coarse image
        of a movement is due its full resolution (the one served longest ago first); else, when
        ``refresh_after`` is given, a refresh of the still view served longest ago (not one
        showing a movement's coarse image), if that was more than ``refresh_after`` seconds ago."""
        now = time.monotonic() if now is None else now
        with self._lock:
            urgent = [(s.served_at, cid) for cid, s in self._clients.items()
                      if s.dirty or s.png or (s.coarse and now - s.moved_at >= MOTION_GAP)]
            if urgent:
                cid = min(urgent)[1]
                state = self._clients[cid]
                coarse = state.dirty and state.moving and not state.png and now - state.moved_at < MOTION_GAP
                return ViewRequest(cid, None, mode, motion_resolution(resolution) if coarse else resolution,
                                   state.version, coarse=coarse)
            still = [(s.served_at, cid) for cid, s in self._clients.items() if not s.coarse]  # a coarse image's
            if refresh_after is None or not still:  # full resolution comes MOTION_GAP after the movement, above
                return None
            served_at, cid = min(still)
            if now - served_at < refresh_after:
                return None
            state = self._clients[cid]
            return ViewRequest(cid, None, mode, resolution, state.version, refresh=True, shown=state.shown)

    def sent(self, request: ViewRequest, image: np.ndarray, now: Optional[float] = None) -> Optional[bool]:
        """``image`` went to the browser that asked: None when it left, else whether it wanted a PNG."""
        now = time.monotonic() if now is None else now
        with self._lock:
            state = self._clients.get(request.client_id)
            if state is None:
                return None
            state.dirty = state.version != request.version
            state.served_at = now
            state.shown = image
            state.coarse = request.coarse
            wants_png, state.png = state.png and not request.coarse, state.png and request.coarse
            return wants_png

    def dropped(self, request: ViewRequest, now: Optional[float] = None) -> None:
        """The request could not be served (a camera that cannot be rendered, a render that
        failed): nothing sent, and it is not asked again until the browser changes something."""
        now = time.monotonic() if now is None else now
        with self._lock:
            state = self._clients.get(request.client_id)
            if state is not None:
                state.dirty = state.version != request.version
                state.png = False
                state.coarse = False
                state.served_at = now

    def kept(self, request: ViewRequest, now: Optional[float] = None) -> None:
        """A refresh found the browser's image still right: nothing sent, the refresh clock restarts."""
        now = time.monotonic() if now is None else now
        with self._lock:
            state = self._clients.get(request.client_id)
            if state is not None:
                state.served_at = now
