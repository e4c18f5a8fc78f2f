"""From photos or a video to a COLMAP scene that ``splattrain fit`` trains (``splattrain process``).

The structure-from-motion stages run in ``pycolmap`` and video frames are decoded by the
ffmpeg that ``imageio-ffmpeg`` ships; both come with the ``process`` extra and are imported
only when the command runs (:func:`require`).
"""

from __future__ import annotations

from types import ModuleType

from .. import interrupts
from ..errors import UserError

INSTALL_HINT = "pip install 'splattrain[process]'"


def require(module: str) -> ModuleType:
    """Import ``module`` (``pycolmap`` or ``imageio_ffmpeg``); UserError naming the extra when missing.

    pycolmap's import installs glog's failure signal handler, SIGTERM included, which would dump
    a native stack and end the process: the stop signals are handed back to
    :mod:`splattrain.interrupts` after it."""
    import importlib

    try:
        loaded = importlib.import_module(module)
    except ImportError as err:
        raise UserError(f"splattrain process needs {module}, which is not installed: {INSTALL_HINT}") from err
    if module == "pycolmap":
        interrupts.reinstall()
    return loaded
