"""splattrain: a hookable trainer for 3D Gaussian Splatting scenes."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# Imported on first use (PEP 562), so `splattrain --help` and `splattrain list` need no PyTorch.
_LAZY = {
    "Hook": "splattrain.hooks", "Priority": "splattrain.hooks", "Writer": "splattrain.writers",
    "DATASETS": "splattrain.registry", "HOOKS": "splattrain.registry", "RENDERERS": "splattrain.registry",
    "WRITERS": "splattrain.registry", "Registry": "splattrain.registry",
}

__all__ = ["DATASETS", "HOOKS", "RENDERERS", "WRITERS", "Hook", "Priority", "Registry", "Writer", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'splattrain' has no attribute {name!r}")
