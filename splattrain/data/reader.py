"""The dataset reader protocol: how ``data.type`` names a reader and ``auto`` finds one."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple

if TYPE_CHECKING:  # pragma: no cover
    from ..config.schema import DataConfig
    from .types import SceneData


class SceneFolder(NamedTuple):
    """A scene a reader found in or below a project root: its folder, a description for messages
    (``colmap model dense/0/sparse``), and the reader options that pick it."""

    folder: Path
    description: str
    options: Dict[str, Any]


class DatasetReader(ABC):
    """Base class of dataset readers (register subclasses with ``@DATASETS.register("name")``).

    The trainer builds the reader named by ``data.type`` with the options in ``data.options``
    (checked against the constructor) and calls :meth:`load` once. With ``data.type: auto`` it
    asks every registered reader's :meth:`detect`, the most recently registered first (so a
    user's reader is asked before the built-in ones), and uses the first that says yes.
    The scene is then normalised (``data.normalize``; on by default when ``normalize_by_default``)
    and split-checked by the trainer; readers return frames in the conventions of
    :class:`~splattrain.Camera` (OpenCV axes, world-to-camera ``viewmat``, ``K`` in pixels).
    """

    #: Whether ``data.normalize: null`` centres and scales the scene (arbitrary world frames).
    normalize_by_default: bool = False
    #: What :meth:`detect` looks for (named when no reader recognises a folder).
    detect_hint: str = ""
    #: Whether a folder :meth:`detect` accepts may still be a project root with the scene deeper
    #: (COLMAP: a distorted model on top, the undistorted scene in ``dense/0``).
    searched_when_detected: bool = False

    @classmethod
    def scenes_below(cls, root: Path) -> List[SceneFolder]:
        """The scenes of this format in ``root`` or below it (a project root holding the scene
        folder); none by default (the reader reads ``data.path`` as given)."""
        return []

    @classmethod
    def detect(cls, path: Path) -> bool:
        """Whether the folder ``path`` holds a scene this reader reads (cheap: look at file names)."""
        return False

    @abstractmethod
    def load(self, path: str, cfg: "DataConfig") -> "SceneData":
        """Read the scene at ``path``; ``cfg`` is the whole ``data`` section (downscale, splits,
        masks, background). Raise :class:`~splattrain.errors.DataError` naming the file for bad input."""
