"""TSDF fusion in a process of its own, so that a stop signal ends it at once.

Open3D's integration, marching cubes and component clustering hold the interpreter lock for as
long as they run (seconds to minutes with a fine voxel), so no signal handler or watchdog thread
of the process that calls them can run meanwhile. Here they run in a child process (spawned:
nothing of the parent's threads or CUDA state is inherited) that ignores SIGINT and SIGTERM and
dies with its parent; the parent sends it one view at a time, waits for each answer in short
polls that act on a pending stop signal, and kills it when it stops or fails.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Any, Optional, Tuple

import numpy as np

from .. import interrupts
from ..errors import DataError, UserError
from .files import MeshArrays
from .fusion import FusionSettings, TsdfFusion, keep_largest_components

#: Seconds between two looks at a pending stop signal while the fusion process works.
POLL_SECONDS = 0.1
_PR_SET_PDEATHSIG = 1


def _detach() -> None:
    """In the fusion process: leave SIGINT / SIGTERM to the parent, die with it (Linux), and keep
    Open3D's own messages off the parent's output (its errors come back through the pipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    except (OSError, AttributeError):  # not Linux: the closed pipe ends it instead
        pass


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


def _handle(fusion: TsdfFusion, kind: str, payload: Any) -> Tuple[str, Any]:
    """One request: ('view', (rgb, depth, K, viewmat)) -> blocks so far; ('extract', components)
    -> (mesh, triangles before components, blocks)."""
    if kind == "view":
        fusion.integrate(*payload)
        return "ok", fusion.blocks
    mesh, blocks = fusion.extract(), fusion.blocks
    fusion.release()
    return "mesh", (keep_largest_components(mesh, int(payload)), len(mesh.faces), blocks)


def _serve(conn: Any, settings: FusionSettings) -> None:
    """The fusion process: answer requests until 'extract' has been answered or the pipe closes."""
    _detach()
    try:
        fusion = TsdfFusion(settings)
        conn.send(("ready", None))
        while True:
            kind, payload = conn.recv()
            answer = _handle(fusion, kind, payload)
            conn.send(answer)
            if answer[0] == "mesh":
                return
    except (EOFError, BrokenPipeError):
        return
    except UserError as error:
        conn.send(("error", type(error)(str(error))))
    except MemoryError:
        conn.send(("error", DataError("the TSDF volume ran out of memory; use a larger --voxel-size (or --max-depth)")))
    except Exception as error:  # Open3D reports its failures as RuntimeError
        conn.send(("error", DataError(f"TSDF fusion failed: {_one_line(error)}")))


class FusionProcess:
    """A :class:`TsdfFusion` in a child process: :meth:`integrate` views, then :meth:`extract`.
    A pending stop signal raises :class:`interrupts.Interrupted` within POLL_SECONDS; errors of
    the fusion come back as the same one-line errors. Use it as a context manager: leaving it
    ends the process."""

    def __init__(self, settings: FusionSettings) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, settings), name="splattrain-fusion", daemon=True)
        self._process.start()
        child.close()
        self._waiting = True  # for 'ready'
        self.blocks = 0

    def __enter__(self) -> "FusionProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _receive(self) -> Tuple[str, Any]:
        while not self._conn.poll(POLL_SECONDS):
            interrupts.check()
            if not self._process.is_alive() and not self._conn.poll():
                raise self._ended()
        try:
            kind, payload = self._conn.recv()
        except (EOFError, ConnectionResetError):
            raise self._ended() from None
        self._waiting = False
        if kind == "error":
            raise payload
        return kind, payload

    def _send(self, message: Tuple[str, Any]) -> None:
        if self._waiting:
            kind, payload = self._receive()
            if kind == "ok":
                self.blocks = int(payload)
        try:
            self._conn.send(message)
        except (BrokenPipeError, ConnectionResetError):
            if self._conn.poll():
                self._receive()  # the error it sent
            raise self._ended() from None
        self._waiting = True

    def _ended(self) -> DataError:
        """The error for a fusion process that ended without answering (killed, crashed)."""
        self._process.join(5.0)
        code = self._process.exitcode
        why = " (killed: out of memory?)" if code == -signal.SIGKILL else ""
        return DataError(f"the TSDF fusion process ended unexpectedly, exit code {code}{why}")

    def integrate(self, rgb: np.ndarray, depth: np.ndarray, K: np.ndarray, viewmat: np.ndarray) -> None:
        """Send one view (as :meth:`TsdfFusion.integrate`); it is fused while the next renders."""
        self._send(("view", (np.ascontiguousarray(rgb), np.ascontiguousarray(depth, np.float32),
                             np.asarray(K, np.float64), np.asarray(viewmat, np.float64))))

    def extract(self, components: int) -> Tuple[MeshArrays, int, int]:
        """The mesh (its ``components`` largest pieces; 0: all), its triangle count before that, and
        the voxel blocks fused."""
        self._send(("extract", components))
        _, (mesh, found, blocks) = self._receive()
        self.blocks = int(blocks)
        return mesh, int(found), self.blocks

    def close(self, timeout: Optional[float] = 5.0) -> None:
        """End the fusion process (at once when it is still working)."""
        if self._process.is_alive():
            self._process.kill()
        self._process.join(timeout)
        self._conn.close()
