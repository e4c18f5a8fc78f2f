"""``splattrain fit --nproc N``: start N ranks on this machine through torchrun's own launcher."""

from __future__ import annotations

import os
import socket
import sys
from typing import List

from ..errors import ConfigError

#: What each rank runs: splattrain's command line, with the working directory off ``sys.path``
#: as under the console script (``python -m`` would put it first, so a ``numpy.py`` there would run).
RANK_ENTRY = "import sys; del sys.path[0]; from splattrain.cli import main; sys.exit(main())"


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 for the ranks' rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_local(nproc: int, fit_argv: List[str]) -> int:
    """Run ``splattrain fit <fit_argv>`` on ``nproc`` ranks on 127.0.0.1 (what
    ``torchrun --nproc-per-node N --master-addr 127.0.0.1 -m splattrain fit ...`` does, without the
    working directory on the ranks' ``sys.path``); returns
    the exit code of the first rank that failed (2, 130, 143, ...) or 0."""
    if nproc < 1:
        raise ConfigError(f"--nproc {nproc}: give at least 1")
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    from .context import usable_cores

    # the ranks set their own thread count (trainer.dist_threads); this only keeps torchrun quiet
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, usable_cores() // nproc)))

    args = get_args_parser().parse_args([
        "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1", "--master-port", str(free_loopback_port()),
        "--no-python", sys.executable, "-u", "-c", RANK_ENTRY, "fit", *fit_argv,
    ])
    try:
        run(args)
    except ChildFailedError as error:
        codes = [failure.exitcode for failure in error.failures.values()]
        return next((code for code in codes if code in (2, 130, 143)), codes[0] if codes else 1)
    return 0
