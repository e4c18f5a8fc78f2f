"""``splattrain download-weights lpips --dir FOLDER`` as a process of its own (stop watchdog on),
its AlexNet backbone fetched from a test's server instead of the official URL.

    python tests/download_launch.py URL SHA256 SIZE FOLDER [--stuck MARKER]

``--stuck MARKER``: after the first bytes arrive, the download's progress display creates MARKER
and never returns (work that reaches no safe point), so only the stop watchdog can end the
process; its wait for a safe point is cut to 1 s.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from pathlib import Path

from splattrain import interrupts
from splattrain.metrics import lpips_files
from splattrain.cli import main
from splattrain.console import Console
from splattrain.metrics.lpips_files import SOURCES, WeightFile


def stuck_transfer(marker: Path):
    @contextlib.contextmanager
    def transfer(self, description, total):
        def advance(received: int) -> None:
            marker.write_text("stuck")
            threading.Event().wait()

        yield advance

    return transfer


if __name__ == "__main__":
    url, sha256, size, folder = sys.argv[1:5]
    backbone, linear = SOURCES["alex"]
    SOURCES["alex"] = (WeightFile(backbone.what, url, sha256, int(size)), linear)
    if sys.argv[5:6] == ["--stuck"]:
        Console.transfer = stuck_transfer(Path(sys.argv[6]))  # type: ignore[method-assign]
        interrupts.SAFE_POINT_SECONDS = 1.0
    assert lpips_files.SOURCES["alex"][0].url == url
    sys.argv = ["splattrain", "download-weights", "lpips", "--dir", folder]
    sys.exit(main())
