"""Running ``python -m splattrain ARGS`` in a child process, quickly (test helper).

Each run is a process of its own, as a user's is: its exit code, its stdout and stderr, and whatever
it leaves behind are checked. Most of a short run's time is Python starting and importing torch,
so a run is forked from a server process that imported the command line already (multiprocessing's
forkserver, which has run nothing else: no thread pool exists to be copied). The child gets the
caller's working folder, environment and arguments and runs ``splattrain/__main__.py`` as
``-m`` would. ``SPLATTRAIN_TEST_SUBPROCESS=1`` runs every command as a fresh interpreter instead.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Dict, Optional, Sequence

#: Imported once by the server: what every command run needs before its own work starts.
PRELOAD = ["torch", "splattrain.cli", "splattrain.engine.trainer", "splattrain.commands.fit"]

_context: Optional[multiprocessing.context.ForkServerContext] = None


def _forked() -> bool:
    return os.environ.get("SPLATTRAIN_TEST_SUBPROCESS") != "1"


def _server() -> multiprocessing.context.ForkServerContext:
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _context = context
    return _context


def _child(args: Sequence[str], cwd: str, env: Dict[str, str], out: str, err: str) -> None:
    """The command run in the forked child; ends the process with its exit code."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin = open(os.devnull)
    sys.stdout = open(1, "w", closefd=False, encoding="utf-8", errors="backslashreplace")
    sys.stderr = open(2, "w", closefd=False, encoding="utf-8", errors="backslashreplace", buffering=1)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.argv = ["splattrain", *args]
    sys.path[0] = cwd  # ``python -m`` puts the working folder first
    code = 0
    try:
        runpy.run_module("splattrain", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException:  # an uncaught error: what the interpreter prints and its exit code
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # as at interpreter exit: wait for threads
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run(args: Sequence[str], cwd: Path, timeout: float = 300,
        env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """``python -m splattrain *args`` in ``cwd``: its exit code, stdout and stderr (text)."""
    command = [sys.executable, "-m", "splattrain", *map(str, args)]
    if not _forked():
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    with tempfile.TemporaryDirectory(prefix="splattrain-cli-") as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        for path in (out, err):
            open(path, "w").close()
        process = _server().Process(target=_child, args=(list(map(str, args)), str(cwd),
                                                         dict(os.environ if env is None else env), out, err))
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(command, timeout)
        stdout = Path(out).read_text(encoding="utf-8", errors="replace")
        stderr = Path(err).read_text(encoding="utf-8", errors="replace")
    return subprocess.CompletedProcess(command, process.exitcode, stdout, stderr)
