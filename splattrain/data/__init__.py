"""Posed images in: dataset readers (one module per format, each registering itself), the scene
they load, and the pipeline that serves training and test views."""

from . import blender, colmap, nerfstudio  # noqa: F401  (register the built-in readers)
