"""Open3D, imported only when a mesh is made: an optional dependency (``splattrain[mesh]``)."""

from __future__ import annotations

from typing import Any

from ..errors import UserError

INSTALL = "pip install 'splattrain[mesh]'"


class MeshExtraMissing(UserError):
    """Open3D is not installed, or cannot load."""


def import_open3d() -> Any:
    """The ``open3d`` module, or MeshExtraMissing in one line naming what to install."""
    try:
        import open3d
    except ModuleNotFoundError as error:
        if error.name is not None and error.name.split(".")[0] == "open3d":
            raise MeshExtraMissing(f"mesh export needs Open3D: {INSTALL}") from None
        raise MeshExtraMissing(f"Open3D is installed but cannot load ({error}); reinstall it: {INSTALL}") from None
    except ImportError as error:  # a system library it links to is missing (libusb, libGL)
        raise MeshExtraMissing(f"Open3D is installed but cannot load: {error} (on Debian or Ubuntu: "
                               "apt-get install libusb-1.0-0 libgomp1)") from None
    return open3d
