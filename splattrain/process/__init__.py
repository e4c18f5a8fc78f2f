"""From photos or a video to a COLMAP scene that ``splattrain fit`` trains (``splattrain process``).

The structure-from-motion stages run in ``pycolmap`` and video frames are decoded by the
ffmpeg that ``imageio-ffmpeg`` ships; both come with the ``process`` extra and are imported
only when the command runs (:func:`require`).
"""

from __future__ import annotations

from types import ModuleType

from ..errors import UserError

INSTALL_HINT = "pip install 'splattrain[process]'"


def require(module: str) -> ModuleType:
    """Import ``module`` (``pycolmap`` or ``imageio_ffmpeg``); UserError naming the extra when missing."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise UserError(f"splattrain process needs {module}, which is not installed: {INSTALL_HINT}") from err
