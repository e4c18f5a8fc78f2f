"""A minimal viser client speaking the page's websocket protocol (test helper).

It connects as a browser would (optionally from another Origin), finds the page's controls by
their labels, and sends what a browser (or a hostile page) could send: control updates,
button clicks, camera poses and raw bytes.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

import msgspec
import viser
import zstandard
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect


class ViewerClient:
    """One websocket connection to a viewer at ``url`` (``http://host:port/``)."""

    def __init__(self, url: str, origin: Optional[str] = None, timeout: float = 10.0) -> None:
        self.url = url
        ws_url = url.replace("http://", "ws://").rstrip("/")
        self.ws: ClientConnection = connect(ws_url, subprotocols=[f"viser-v{viser.__version__}"],  # type: ignore[list-item]
                                            origin=origin, open_timeout=timeout)  # type: ignore[arg-type]
        self.controls: Dict[str, str] = {}  # label -> uuid

    def read(self, seconds: float = 0.5) -> list:
        """The messages the server sent within ``seconds`` (their dicts); records control uuids."""
        messages = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                raw = self.ws.recv(timeout=max(0.01, deadline - time.monotonic()))
            except (TimeoutError, ConnectionClosed):  # nothing more, or the server closed the connection
                break
            assert isinstance(raw, bytes)
            size, packed = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:16], "little")
            inner = zstandard.ZstdDecompressor().decompress(raw[16:16 + packed], max_output_size=size)
            for message in msgspec.msgpack.decode(inner)["messages"]:
                messages.append(message)
                label = (message.get("props") or {}).get("label") if isinstance(message, dict) else None
                if label and "uuid" in message:
                    self.controls[label] = message["uuid"]
        return messages

    def wait_for_control(self, label: str, seconds: float = 10.0) -> str:
        deadline = time.monotonic() + seconds
        while label not in self.controls and time.monotonic() < deadline:
            self.read(0.2)
        return self.controls[label]

    def send(self, message: Dict[str, Any]) -> None:
        self.ws.send(msgspec.msgpack.encode(message))

    def set_control(self, label: str, value: Any) -> None:
        """What the page sends when a control changes (a button click is ``value=True``)."""
        self.send({"type": "GuiUpdateMessage", "uuid": self.wait_for_control(label), "updates": {"value": value}})

    def set_camera(self, fov: float = 0.8, wxyz=(1.0, 0.0, 0.0, 0.0), position=(0.0, 0.0, -4.0),
                   width: int = 320, height: int = 240) -> None:
        """What the page sends when its camera moves."""
        self.send({"type": "ViewerCameraMessage", "wxyz": list(wxyz), "position": list(position), "fov": fov,
                   "near": 0.01, "far": 1000.0, "image_height": height, "image_width": width,
                   "look_at": [0.0, 0.0, 0.0], "up_direction": [0.0, -1.0, 0.0]})

    def close(self) -> None:
        self.ws.close()
