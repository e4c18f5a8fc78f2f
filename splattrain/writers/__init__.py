"""Writers: where logged scalars, images, histograms and configs go."""

# Importing the modules registers the built-in writers (optional packages are imported lazily).
from . import (  # noqa: F401
    csv_writer, dvclive_writer, image, jsonl, mlflow_writer, neptune_writer, tensorboard, wandb_writer,
)
from .base import Writer, WriterGroup, build_writers, check_writer_spec

__all__ = ["Writer", "WriterGroup", "build_writers", "check_writer_spec"]
