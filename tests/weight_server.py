"""A local HTTP server on 127.0.0.1 serving generated LPIPS weight files, and LPIPS's sources pointed at it."""

from __future__ import annotations

import hashlib
import http.server
import io
import socket
import threading
from pathlib import Path
from typing import Dict, List

import torch

from lpips_weights import FILES, backbone_state, linear_state
from splattrain import lpips_files
from splattrain.lpips_files import WeightFile


def weight_bytes(net: str = "alex") -> Dict[str, bytes]:
    """URL path -> content of ``net``'s two files, generated with the real files' keys and shapes."""
    files = {}
    for path, state in ((f"/models/{FILES[net]}", backbone_state(net)), (f"/lpips/v0.1/{net}.pth", linear_state(net))):
        buffer = io.BytesIO()
        torch.save(state, buffer)
        files[path] = buffer.getvalue()
    return files


class WeightServer:
    """Serves ``files`` (path -> bytes) with their Content-Length. ``cut`` (a fraction) makes it
    close the connection after that share of each file. ``requests`` lists the paths asked for."""

    def __init__(self, files: Dict[str, bytes], cut: float = 1.0) -> None:
        self.files, self.cut, self.requests = files, cut, []  # type: ignore[var-annotated]
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server.requests.append(self.path)
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
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
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def point_sources(monkeypatch, base_url: str, files: Dict[str, bytes], net: str = "alex", sha256: str = "") -> None:
    """LPIPS's ``net`` sources at ``base_url``, expecting the SHA-256 of ``files`` (or ``sha256`` for both)."""
    (backbone, linear), paths = lpips_files.SOURCES[net], list(files)
    sources = tuple(WeightFile(source.what, base_url + path, sha256 or hashlib.sha256(files[path]).hexdigest())
                    for source, path in zip((backbone, linear), paths))
    monkeypatch.setitem(lpips_files.SOURCES, net, sources)


def files_under(folder: Path) -> List[Path]:
    """Every file under ``folder`` (temporaries included)."""
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []

