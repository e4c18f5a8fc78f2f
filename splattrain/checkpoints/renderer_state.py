"""A checkpoint's ``renderer`` entry: written from the run's renderer, handed back to one."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping

from ..errors import CheckpointError
from ..render.base import Renderer


def renderer_entry(renderer: Renderer) -> Dict[str, Any]:
    """The checkpoint's ``renderer`` entry: the renderer's ``state`` and whether its scene files
    differ from the Gaussians (``folds_into_export``: ``export`` then needs the renderer)."""
    return {"type": type(renderer).__name__, "state": renderer.state_dict(),
            "folds_into_export": renderer.folds_into_export()}


def restore_renderer(renderer: Renderer, checkpoint: Mapping[str, Any], path: Path) -> None:
    """Hand the checkpoint's renderer state to ``renderer`` (an empty one when the checkpoint has
    none: it was written before renderers kept state); CheckpointError when it does not fit."""
    state = (checkpoint.get("renderer") or {}).get("state") or {}
    try:
        renderer.load_state_dict(state)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
        raise CheckpointError(f"checkpoint '{path}': the renderer state does not fit renderer "
                              f"{type(renderer).__name__} ({type(err).__name__}: {err})") from None
