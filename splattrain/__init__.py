"""splattrain: a hookable trainer for 3D Gaussian Splatting scenes."""

__version__ = "0.1.0"

from .hooks import Hook, Priority  # noqa: E402
from .registry import DATASETS, HOOKS, RENDERERS, WRITERS, Registry  # noqa: E402
from .writers import Writer  # noqa: E402

__all__ = ["DATASETS", "HOOKS", "RENDERERS", "WRITERS", "Hook", "Priority", "Registry", "Writer", "__version__"]
