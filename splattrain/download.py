"""One file fetched over HTTP(S), checked against its size and SHA-256 and written atomically.

Written with urllib rather than ``torch.hub.download_url_to_file`` because a run needs what that
function does not offer: a timeout (an offline machine must not hang a run), progress shown
through splattrain's console, a stop signal acted on at once, and a download cut short told
apart from a file whose hash differs. Nothing is left at the destination unless the whole file
arrived and its SHA-256 matched (temporary file beside it, then one rename).

The file's size is known in advance, so a server cannot make a download take more: a declared
``Content-Length`` other than that size is refused before any byte is written, and a body
without one is cut off at the first byte past it. A transfer that falls below :data:`MIN_RATE`
on average once :data:`GRACE_S` have passed (a server that sends a byte now and then, or its
headers that slowly) is ended by a watcher thread, which also ends a read that would hold off a
stop signal. Text a server sends (a reason phrase, a ``Location``) reaches messages with its
control characters escaped (:func:`printable`).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import BinaryIO, Callable, ContextManager, Iterator, List, Optional

from . import __version__, interrupts
from .errors import UserError, describe_os_error
from .io.atomic import atomic_path

#: Seconds to wait for a connection or for the next bytes before giving up.
TIMEOUT_S = 10.0
#: Bytes per second a transfer must average once :data:`GRACE_S` have passed (counted from the
#: request, headers included): a file of ``size`` bytes must have arrived after
#: ``GRACE_S + size / MIN_RATE`` seconds (about 2 hours for VGG16's 528 MiB).
MIN_RATE = 64 * 1024
#: Seconds a transfer may take before :data:`MIN_RATE` applies (connecting, a slow start).
GRACE_S = 30.0
_CHUNK = 1 << 20
_POLL_S = 0.1
_DIGITS = re.compile(r"[0-9]{1,20}")

#: ``progress(description, total_bytes_or_None)`` opens a display; the callable it yields takes
#: the bytes received since its last call (``Console.transfer`` is one).
Progress = Callable[[str, Optional[int]], ContextManager[Callable[[int], None]]]


def printable(text: str) -> str:
    """``text`` with every character that is not printable (terminal escape codes, carriage
    returns, bidirectional overrides) written as a Python escape (``\\x1b``, ``\\u202e``)."""
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)


class DownloadError(UserError):
    """A file could not be fetched or did not match its size or SHA-256; names the URL and where the file goes."""

    def __init__(self, url: str, destination: Path, why: str) -> None:
        super().__init__(printable(f"could not download {url} ({why}); to add it by hand, save that file as "
                                   f"{destination}"))
        self.url, self.destination, self.why = url, destination, printable(why)


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file, as hex digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def _silent(description: str, total: Optional[int]) -> Iterator[Callable[[int], None]]:
    yield lambda received: None


class _Watch:
    """A thread that shuts a transfer's sockets down, which ends a read blocked on them, once a
    stop signal is pending or the transfer has fallen below :data:`MIN_RATE` after
    :data:`GRACE_S`; ``ended`` then says which ("signal" or "slow")."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.received = 0
        self.ended: Optional[str] = None
        self.min_rate, self.grace = MIN_RATE, GRACE_S
        self._sockets: List[socket.socket] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="splattrain-download-watch", daemon=True)

    def __enter__(self) -> "_Watch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def add(self, sock: socket.socket) -> None:
        """Watch a connection's socket (shut down at once when the transfer has already ended)."""
        with self._lock:
            self._sockets.append(sock)
            if self.ended is not None:
                self._shut(sock)

    def seconds(self) -> float:
        return time.monotonic() - self.start

    def _behind(self) -> bool:
        late = self.seconds() - self.grace
        return late > 0 and self.received < self.min_rate * late

    def _run(self) -> None:
        while not self._done.wait(_POLL_S):
            ended = "signal" if interrupts.pending() is not None else "slow" if self._behind() else None
            if ended is not None:
                with self._lock:
                    self.ended = ended
                    for sock in self._sockets:
                        self._shut(sock)
                return

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        try:  # the plain socket's shutdown, under TLS too: the TLS object is left to the reading thread
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:  # already closed
            pass

    def check(self, url: str, destination: Path) -> None:
        """Act on what ended the transfer: raise Interrupted for a stop signal, DownloadError when too slow."""
        interrupts.check()
        if self.ended == "slow":
            raise DownloadError(url, destination, f"too slow: {self.received:,} bytes in {self.seconds():.0f} s, "
                                f"below {self.min_rate / 1024:g} KiB/s after the first {self.grace:g} s")


def _opener(watch: _Watch) -> urllib.request.OpenerDirector:
    """urllib's opener (redirects followed, to http(s) only) whose connections ``watch`` can end
    once connected (a TLS handshake is bounded by the socket's timeout as a whole)."""

    def watched(base: type) -> type:
        class Connection(base):  # type: ignore[misc, valid-type]
            def connect(self) -> None:
                super().connect()
                watch.add(self.sock)

        return Connection

    class Watched(urllib.request.AbstractHTTPHandler):
        def do_open(self, http_class: type, req: urllib.request.Request, **kwargs: object) -> object:
            return super().do_open(watched(http_class), req, **kwargs)

    class HTTPHandler(Watched, urllib.request.HTTPHandler):
        pass

    class HTTPSHandler(Watched, urllib.request.HTTPSHandler):
        pass

    return urllib.request.build_opener(HTTPHandler(), HTTPSHandler())


def download(url: str, destination: Path, sha256: str, size: int, progress: Optional[Progress] = None,
             timeout: float = TIMEOUT_S) -> Path:
    """Fetch ``url`` into ``destination`` when it is ``size`` bytes with SHA-256 ``sha256``;
    :class:`DownloadError` (nothing written) when the server cannot be reached, declares or
    sends another size, is too slow, stops short, or the hash differs. A stop signal ends the
    transfer at once with :class:`~splattrain.interrupts.Interrupted`."""
    destination = Path(destination)
    request = urllib.request.Request(url, headers={"User-Agent": f"splattrain/{__version__}"})
    with _Watch() as watch:
        try:
            response = _opener(watch).open(request, timeout=timeout)
        except urllib.error.HTTPError as err:
            watch.check(url, destination)
            raise DownloadError(url, destination, f"HTTP {err.code} {err.reason}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as err:
            watch.check(url, destination)
            raise DownloadError(url, destination, _why(err, timeout)) from None
        with response:
            try:
                _save(response, url, destination, sha256, size, progress, timeout, watch)
            except OSError as err:  # the folder cannot be written (read-only, full, a file in the way)
                raise DownloadError(url, destination, f"it cannot be saved there: {describe_os_error(err)}") from None
    return destination


def _declared_size(response: http.client.HTTPResponse, url: str, destination: Path, size: int) -> None:
    """Refuse a ``Content-Length`` that is not one run of ASCII digits, or differs from ``size``."""
    lengths = response.headers.get_all("Content-Length") or []
    for length in lengths:
        if not _DIGITS.fullmatch(length.strip()):
            raise DownloadError(url, destination, f"the server sent an invalid Content-Length: '{length}'")
    declared = {int(length) for length in lengths}
    if len(declared) > 1:
        raise DownloadError(url, destination, f"the server sent {len(declared)} different Content-Length headers")
    if declared and declared != {size}:
        raise DownloadError(url, destination, f"the server declares {declared.pop():,} bytes; the file is {size:,}")


def _save(response: http.client.HTTPResponse, url: str, destination: Path, sha256: str, size: int,
          progress: Optional[Progress], timeout: float, watch: _Watch) -> None:
    """Stream ``response`` into ``destination`` through a temporary file, renamed once complete and verified."""
    _declared_size(response, url, destination, size)
    digest = hashlib.sha256()
    with atomic_path(destination) as temporary, interrupts.removed_if_ended(temporary), open(temporary, "wb") as out:
        with (progress or _silent)(f"{destination.name} from {url}", size) as advance:
            while True:
                chunk = _read(response, min(_CHUNK, size + 1 - watch.received), url, destination, timeout, watch)
                if not chunk:
                    break
                watch.received += len(chunk)
                if watch.received > size:
                    raise DownloadError(url, destination, f"the server sent more than the file's {size:,} bytes")
                out.write(chunk)
                digest.update(chunk)
                advance(len(chunk))
            if watch.received != size:
                raise DownloadError(url, destination, f"the connection closed after {watch.received:,} of {size:,} bytes")
            if digest.hexdigest() != sha256:
                raise DownloadError(url, destination, f"its SHA-256 is {digest.hexdigest()}, expected {sha256}")


def _read(response: BinaryIO, limit: int, url: str, destination: Path, timeout: float, watch: _Watch) -> bytes:
    """The next bytes that have arrived (at most ``limit``); b"" at the end of the body."""
    interrupts.check()
    try:
        chunk = response.read1(limit)
    except (OSError, http.client.HTTPException, ValueError) as err:
        watch.check(url, destination)
        raise DownloadError(url, destination, f"stopped after {watch.received:,} bytes: "
                            f"{_why(err, timeout)}") from None
    watch.check(url, destination)
    return chunk


def _why(error: BaseException, timeout: float) -> str:
    """What went wrong, in a few words."""
    reason = getattr(error, "reason", error)
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"no answer within {timeout:g} s"
    if isinstance(reason, socket.gaierror):
        return f"the host name could not be resolved: {reason.strerror or reason}"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, http.client.IncompleteRead):
        return "the connection closed early"
    text = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
    return f"{type(reason).__name__}: {text}" if text != type(reason).__name__ else text
