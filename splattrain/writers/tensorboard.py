"""TensorBoard event files under ``<run_dir>/tb``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict

import numpy as np

from ..io.png import png_bytes
from ..registry import WRITERS
from .base import Writer


@WRITERS.register("tensorboard", aliases=("TensorboardWriter",))
class TensorboardWriter(Writer):
    """Scalars, validation image grids, histograms and the config text as TensorBoard events (tb/)."""

    def __init__(self, run_dir: str | Path, subdir: str = "tb") -> None:
        super().__init__(run_dir)
        self._writer = summary_writer_class()(log_dir=str(self.run_dir / subdir))
        _quiet_writer_threads()

    @property
    def path(self) -> Path:
        """The events file this writer appends to (its folder until the file exists)."""
        folder = Path(self._writer.get_logdir())
        files = sorted(folder.glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime)
        return files[-1] if files else folder

    def write_scalar(self, tag: str, value: float, step: int) -> None:
        self._writer.add_scalar(tag, float(value), step)

    def write_image(self, tag: str, image: np.ndarray, step: int) -> None:
        # The summary add_image makes, from our own PNG (PyTorch's encodes at PIL's slower
        # default level, after a float round trip): half the time of a validation's grids.
        from tensorboard.compat.proto.summary_pb2 import Summary

        height, width = image.shape[:2]
        picture = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=png_bytes(image))
        self._writer.file_writer.add_summary(Summary(value=[Summary.Value(tag=tag, image=picture)]), step)

    def write_histogram(self, tag: str, values: np.ndarray, step: int) -> None:
        self._writer.add_histogram(tag, values, step)

    def write_config(self, config: Dict[str, Any], text: str) -> None:
        self._writer.add_text("config", "```yaml\n" + text + "\n```", 0)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


#: Packages TensorBoard's file layer imports only to reach ``s3://`` and fsspec URLs when they are
#: installed (botocore and boto3 pull in urllib3 and more: about half of the writer's import time).
#: A run's events go to a local folder, so they are left out of its import.
REMOTE_FILESYSTEMS = ("botocore", "fsspec")


def summary_writer_class() -> type:
    """PyTorch's ``SummaryWriter``, imported without the remote file systems TensorBoard would load
    for URLs a run never writes to (those already imported by something else stay as they are)."""
    if "torch.utils.tensorboard" in sys.modules:
        return sys.modules["torch.utils.tensorboard"].SummaryWriter
    left_out = [name for name in REMOTE_FILESYSTEMS if name not in sys.modules]
    for name in left_out:
        sys.modules[name] = None  # type: ignore[assignment]  # ``import name`` raises ImportError
    try:
        from torch.utils.tensorboard import SummaryWriter
    finally:
        for name in left_out:
            if sys.modules.get(name, False) is None:
                del sys.modules[name]
    return SummaryWriter


def _quiet_writer_threads() -> None:
    """TensorBoard writes events on a thread of its own, which keeps a failed write's exception
    (raised again by the next write or flush: a warning naming the file) and re-raises it, so
    Python would also print that thread's traceback. Those threads end without it."""
    import threading

    previous = threading.excepthook
    if getattr(previous, "splattrain_quiet", False):
        return

    def excepthook(args: threading.ExceptHookArgs) -> None:
        if type(args.thread).__name__ == "_AsyncWriterThread" and isinstance(args.exc_value, Exception):
            return  # kept in the thread's ``exception``; the writer raises it where it is handled
        previous(args)

    excepthook.splattrain_quiet = True  # type: ignore[attr-defined]
    threading.excepthook = excepthook
