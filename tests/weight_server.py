"""A local HTTP server on 127.0.0.1 serving generated LPIPS weight files, and LPIPS's sources pointed at it."""

from __future__ import annotations

import hashlib
import http.server
import io
import socket
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

from lpips_weights import FILES, backbone_state, linear_state
from splattrain.metrics import lpips_files
from splattrain.metrics.lpips_files import WeightFile


def weight_bytes(net: str = "alex") -> Dict[str, bytes]:
    """URL path -> content of ``net``'s two files, generated with the real files' keys and shapes."""
    files = {}
    for path, state in ((f"/models/{FILES[net]}", backbone_state(net)), (f"/lpips/v0.1/{net}.pth", linear_state(net))):
        buffer = io.BytesIO()
        torch.save(state, buffer)
        files[path] = buffer.getvalue()
    return files


#: ``reply(handler, body, server)`` answers a request in its own way (a hostile server).
Reply = Callable[[http.server.BaseHTTPRequestHandler, bytes, "WeightServer"], None]


class WeightServer:
    """Serves ``files`` (path -> bytes) with their Content-Length. ``cut`` (a fraction) makes it
    close the connection after that share of each file; ``reply`` answers instead (the path's
    body given). ``requests`` lists the paths asked for; ``stop`` is set when the server closes."""

    def __init__(self, files: Dict[str, bytes], cut: float = 1.0, reply: Optional[Reply] = None) -> None:
        self.files, self.cut, self.requests = files, cut, []  # type: ignore[var-annotated]
        self.reply, self.stop, self.sent = reply, threading.Event(), 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server.requests.append(self.path)
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                if server.reply is not None:
                    try:
                        server.reply(self, body, server)
                    except (BrokenPipeError, ConnectionResetError):  # the client hung up
                        pass
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: int(len(body) * server.cut)])  # HTTP/1.0: the connection closes after

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "WeightServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


def declaring(*lengths: str) -> Reply:
    """A reply sending the file under the Content-Length headers ``lengths`` (none: no header),
    each in ISO-8859-1 where it can be, else in UTF-8."""

    def reply(handler: http.server.BaseHTTPRequestHandler, body: bytes, server: WeightServer) -> None:
        handler.wfile.write(b"HTTP/1.0 200 OK\r\n")
        for length in lengths:
            line = f"Content-Length: {length}\r\n"
            handler.wfile.write(line.encode("latin-1") if line.isascii() or max(map(ord, line)) < 256
                                else line.encode("utf-8"))
        handler.wfile.write(b"\r\n" + body)

    return reply


def endless(times: int) -> Reply:
    """A reply with no Content-Length sending the file ``times`` over (``server.sent`` counts
    the bytes written), as fast as the client takes it."""

    def reply(handler: http.server.BaseHTTPRequestHandler, body: bytes, server: WeightServer) -> None:
        handler.send_response(200)
        handler.end_headers()
        for _ in range(times):
            handler.wfile.write(body)
            server.sent += len(body)

    return reply


def drip(headers: bool, interval: float = 0.2, limit: float = 30.0) -> Reply:
    """A reply sending one byte every ``interval`` seconds (for ``limit`` seconds at most): of
    the status line and headers when ``headers``, else of the body after proper headers."""

    def reply(handler: http.server.BaseHTTPRequestHandler, body: bytes, server: WeightServer) -> None:
        data = body
        if headers:
            data = f"HTTP/1.0 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
        else:
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
        end = time.monotonic() + limit
        for byte in data:
            if server.stop.wait(interval) or time.monotonic() > end:
                return
            handler.wfile.write(bytes([byte]))
            server.sent += 1

    return reply


def status(code: int, reason: str, **headers: str) -> Reply:
    """A reply with status ``code``, the reason phrase ``reason`` as given and ``headers``."""

    def reply(handler: http.server.BaseHTTPRequestHandler, body: bytes, server: WeightServer) -> None:
        handler.wfile.write(f"HTTP/1.0 {code} {reason}\r\n".encode("latin-1"))
        for name, value in {**headers, "Content-Length": "0"}.items():
            handler.wfile.write(f"{name.replace('_', '-')}: {value}\r\n".encode("latin-1"))
        handler.wfile.write(b"\r\n")

    return reply


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def point_sources(monkeypatch, base_url: str, files: Dict[str, bytes], net: str = "alex", sha256: str = "") -> None:
    """LPIPS's ``net`` sources at ``base_url``, expecting the size and SHA-256 of ``files`` (or
    ``sha256`` for both)."""
    (backbone, linear), paths = lpips_files.SOURCES[net], list(files)
    sources = tuple(WeightFile(source.what, base_url + path, sha256 or hashlib.sha256(files[path]).hexdigest(),
                               len(files[path]))
                    for source, path in zip((backbone, linear), paths))
    monkeypatch.setitem(lpips_files.SOURCES, net, sources)


def files_under(folder: Path) -> List[Path]:
    """Every file under ``folder`` (temporaries included)."""
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []

