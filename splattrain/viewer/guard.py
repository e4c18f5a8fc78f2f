"""What the viewer lets in: which web pages may open its websocket, which values a browser may set,
and what its bad messages may do (nothing but one warning).

A browser sends the ``Origin`` of the page that opens a websocket. The viewer accepts the
websocket only from its own page (the Origin's host and port are those the browser asked for,
on a loopback name or an IP address, so no other site and no DNS name rebound to this machine),
from a connection without an Origin (not a browser), or from an origin the user listed in
``allow_origins``. Anything else is refused during the handshake (HTTP 403), before any message
is read.

viser (1.x) has no option for this. Its server opens the socket with
``websockets.asyncio.server.serve(..., process_request=...)``; :func:`origin_checked_serve`
wraps that call while the server starts, putting the check in front of viser's own handler.
"""

from __future__ import annotations

import contextlib
import http
import ipaddress
import logging
import math
import threading
from typing import Callable, Iterator, List, Optional, Sequence
from urllib.parse import urlsplit

from ..errors import ConfigError
from .camera import MAX_RESOLUTION, MIN_RESOLUTION
from .images import RENDER_MODES

#: The range of each setting a browser may change (values outside are refused and the control reset).
SHARE_RANGE = (0.1, 1.0)
REFRESH_RANGE = (0.1, 600.0)

_LOOPBACK_NAMES = ("localhost",)
_PATCH_LOCK = threading.Lock()


def check_allow_origins(values: Sequence[str] | None, option: str) -> List[str]:
    """The allowed origins normalised (``scheme://host[:port]`` in lower case, or ``*``);
    ConfigError naming ``option`` for anything else."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    out = []
    for value in values:
        text = str(value).strip().rstrip("/").lower()
        if text == "*":
            out.append(text)
            continue
        parts = urlsplit(text)
        try:
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError:
            parts = urlsplit("")
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query:
            raise ConfigError(f"{option} {value!r}: give origins as http(s)://host[:port] (or '*' for any page)")
        out.append(f"{parts.scheme}://{parts.netloc}")
    return out


def _is_ip_or_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def origin_allowed(origin: Optional[str], host_header: Optional[str], allowed: Sequence[str]) -> bool:
    """Whether a websocket handshake with these ``Origin`` and ``Host`` headers may connect."""
    if origin is None:
        return True  # not a browser: a page cannot leave the header out
    origin = origin.strip().rstrip("/").lower()
    if "*" in allowed or origin in allowed:
        return True
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False  # "null" (a file or sandboxed page) and anything odd
    return _is_ip_or_loopback(parts.hostname) and parts.netloc == (host_header or "").strip().lower()


@contextlib.contextmanager
def origin_checked_serve(allowed: Sequence[str], refused: Callable[[str], None]) -> Iterator[List[bool]]:
    """While in the block, websocket servers that start check each handshake's Origin
    (:func:`origin_allowed`); ``refused(origin)`` hears of each refusal. Yields a list that
    holds True once a server started with the check (so a caller can tell it is in place)."""
    import websockets.asyncio.server as ws_server

    installed: List[bool] = []
    original = ws_server.serve

    def serve(*args, **kwargs):
        inner = kwargs.get("process_request")

        def process_request(connection, request):
            headers = request.headers
            if headers.get("Upgrade", "").lower() == "websocket":
                origin = headers.get("Origin")
                if not origin_allowed(origin, headers.get("Host"), allowed):
                    refused(str(origin))
                    return connection.respond(http.HTTPStatus.FORBIDDEN, "this page's origin may not use the viewer\n")
            return inner(connection, request) if inner is not None else None

        kwargs["process_request"] = process_request
        installed.append(True)
        return original(*args, **kwargs)

    with _PATCH_LOCK:
        ws_server.serve = serve
        try:
            yield installed
        finally:
            ws_server.serve = original


def setting_value(name: str, value: object) -> object:
    """``value`` as the setting ``name`` holds it, or None when a browser sent something the
    control cannot hold (a mode that is not one of the choices, a number out of range or not finite)."""
    if name == "mode":
        return value if isinstance(value, str) and value in RENDER_MODES else None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    low, high = {"resolution": (MIN_RESOLUTION, MAX_RESOLUTION), "train_share": SHARE_RANGE,
                 "refresh": REFRESH_RANGE}[name]
    if not math.isfinite(number) or not low <= number <= high:
        return None
    return int(round(number)) if name == "resolution" else number


class BrowserErrorFilter(logging.Filter):
    """Turns the tracebacks viser's threads log for a browser's unreadable message (a
    connection handler or message task that raised inside viser) into one warning each kind."""

    LOGGERS = ("websockets.server", "asyncio")

    def __init__(self, warn: Callable[[str], None]) -> None:
        super().__init__()
        self.warn = warn
        self.seen: set = set()

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not _raised_in_viser(exc):
            return True
        key = (type(exc).__name__, str(exc)[:200])
        if key not in self.seen and len(self.seen) < 100:
            self.seen.add(key)
            self.warn(f"viewer: ignored a message a browser sent ({type(exc).__name__}: {str(exc)[:200]})")
        return False

    def install(self) -> "BrowserErrorFilter":
        for name in self.LOGGERS:
            logging.getLogger(name).addFilter(self)
        return self

    def remove(self) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeFilter(self)


def _raised_in_viser(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if "/viser/" in filename or "/splattrain/viewer/" in filename:
            return True
        tb = tb.tb_next
    return False
