"""Writers: where logged scalars, images and configs go."""

from . import image, jsonl, tensorboard  # noqa: F401  (register the built-in writers)
from .base import Writer, WriterGroup

__all__ = ["Writer", "WriterGroup"]
