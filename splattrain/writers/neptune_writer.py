"""Neptune, offline by default (``pip install 'splattrain[neptune]'``)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from ..io.png import to_uint8
from ..registry import WRITERS
from .base import Writer
from .rows import scalar_row


@WRITERS.register("neptune", aliases=("NeptuneWriter",))
class NeptuneWriter(Writer):
    """Neptune run (offline by default: files under <run_dir>/.neptune, ``neptune sync`` uploads later).

    Scalars are series at their step (non-finite values are skipped), validation images are
    image series, the config is the ``config`` namespace (values Neptune cannot store become
    strings) plus ``config.yaml`` text.

    Args:
        project: ``workspace/project`` (offline runs need none; online ones need it or NEPTUNE_PROJECT).
        name: run name (default: the run directory's name).
        mode: ``offline`` (default), ``async``, ``sync`` or ``debug``; online modes read the
            API token from NEPTUNE_API_TOKEN.
        tags: run tags.
    """

    requires = ("neptune", "neptune")

    def __init__(
        self,
        run_dir: str | Path,
        project: Optional[str] = None,
        name: Optional[str] = None,
        mode: str = "offline",
        tags: Optional[List[str]] = None,
    ) -> None:
        super().__init__(run_dir)
        self._neptune = self.load_requirement()
        logging.getLogger("neptune").setLevel(logging.WARNING)  # its info lines would bypass the console
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # Neptune keeps offline data in $NEPTUNE_DATA_DIRECTORY (default ./.neptune): put it in the run.
        previous = os.environ.get("NEPTUNE_DATA_DIRECTORY")
        os.environ["NEPTUNE_DATA_DIRECTORY"] = str(self.run_dir / ".neptune")
        try:
            self._run = self._neptune.init_run(
                project=project,
                name=name or self.run_dir.name,
                mode=mode,
                tags=list(tags or []),
                capture_stdout=False,
                capture_stderr=False,
                capture_hardware_metrics=False,
                capture_traceback=False,
                source_files=[],
                git_ref=False,
            )
        finally:
            if previous is None:
                os.environ.pop("NEPTUNE_DATA_DIRECTORY", None)
            else:
                os.environ["NEPTUNE_DATA_DIRECTORY"] = previous

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        for tag, value in scalar_row(scalars).items():
            if value is not None:
                self._run[tag].append(value, step=step)

    def write_scalar(self, tag: str, value: float, step: int) -> None:
        self.write_scalars({tag: value}, step)

    def write_image(self, tag: str, image: np.ndarray, step: int) -> None:
        from neptune.types import File

        self._run[tag].append(File.as_image(to_uint8(image)), step=step)

    def write_config(self, config: Dict[str, Any], text: str) -> None:
        from neptune.utils import stringify_unsupported

        self._run["config"] = stringify_unsupported(config)
        self._run["config.yaml"] = text

    def flush(self) -> None:
        self._run.wait()

    def close(self) -> None:
        self._run.stop()
