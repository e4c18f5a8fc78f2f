"""One file fetched over HTTP(S), checked against its SHA-256 and written atomically.

Written with urllib rather than ``torch.hub.download_url_to_file`` because a run needs what that
function does not offer: a timeout (an offline machine must not hang a run), progress shown
through splattrain's console, a stop signal acted on between chunks, and a download cut short
told apart from a file whose hash differs. Nothing is left at the destination unless the whole
file arrived and its SHA-256 matched (temporary file beside it, then one rename).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, ContextManager, Iterator, Optional

from . import __version__, interrupts
from .errors import UserError, describe_os_error
from .io.atomic import atomic_path

#: Seconds to wait for a connection or for the next bytes before giving up.
TIMEOUT_S = 10.0
_CHUNK = 1 << 20

#: ``progress(description, total_bytes_or_None)`` opens a display; the callable it yields takes
#: the bytes received since its last call (``Console.transfer`` is one).
Progress = Callable[[str, Optional[int]], ContextManager[Callable[[int], None]]]


class DownloadError(UserError):
    """A file could not be fetched or did not match its SHA-256; names the URL and where the file goes."""

    def __init__(self, url: str, destination: Path, why: str) -> None:
        super().__init__(f"could not download {url} ({why}); to add it by hand, save that file as {destination}")
        self.url, self.destination, self.why = url, destination, why


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


def download(url: str, destination: Path, sha256: str, progress: Optional[Progress] = None,
             timeout: float = TIMEOUT_S) -> Path:
    """Fetch ``url`` into ``destination`` when its SHA-256 is ``sha256``; :class:`DownloadError`
    (nothing written) when the server cannot be reached, the transfer stops short, or the hash
    differs. A stop signal between chunks raises :class:`~splattrain.interrupts.Interrupted`."""
    destination = Path(destination)
    request = urllib.request.Request(url, headers={"User-Agent": f"splattrain/{__version__}"})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        raise DownloadError(url, destination, f"HTTP {err.code} {err.reason}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as err:
        raise DownloadError(url, destination, _why(err, timeout)) from None
    with response:
        try:
            _save(response, url, destination, sha256, progress, timeout)
        except OSError as err:  # the folder cannot be written (read-only, full, a file in the way)
            raise DownloadError(url, destination, f"it cannot be saved there: {describe_os_error(err)}") from None
    return destination


def _save(response: http.client.HTTPResponse, url: str, destination: Path, sha256: str,
          progress: Optional[Progress], timeout: float) -> None:
    """Stream ``response`` into ``destination`` through a temporary file, renamed once complete and verified."""
    length = response.headers.get("Content-Length")
    total = int(length) if length and length.isdigit() else None
    digest, received = hashlib.sha256(), 0
    with atomic_path(destination) as temporary, open(temporary, "wb") as out:
        with (progress or _silent)(f"{destination.name} from {url}", total) as advance:
            while True:
                interrupts.check()
                try:
                    chunk = response.read(_CHUNK)
                except (OSError, http.client.HTTPException) as err:
                    raise DownloadError(url, destination, f"stopped after {received:,} bytes: "
                                        f"{_why(err, timeout)}") from None
                if not chunk:
                    break
                out.write(chunk)
                digest.update(chunk)
                received += len(chunk)
                advance(len(chunk))
            if total is not None and received != total:
                raise DownloadError(url, destination, f"the connection closed after {received:,} of {total:,} bytes")
            if digest.hexdigest() != sha256:
                raise DownloadError(url, destination, f"its SHA-256 is {digest.hexdigest()}, expected {sha256}")


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
