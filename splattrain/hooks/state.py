"""Reading a hook's state back from a checkpoint, each value checked for its type.

A hook's ``load_state_dict`` reads its entries with these functions, so a crafted or damaged
state is refused (a ValueError naming the entry) while the checkpoint is read, before the run
folder changes, never later in the middle of training.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch

_REQUIRED: Any = object()


def _get(state: Mapping[str, Any], key: str, default: Any) -> Any:
    if key in state:
        return state[key]
    if default is _REQUIRED:
        raise ValueError(f"'{key}' is missing")
    return default


def _is_number(value: Any) -> bool:
    """A real number (NaN and infinity included: a loss or a metric may be either)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def number(state: Mapping[str, Any], key: str, default: Any = _REQUIRED, optional: bool = False) -> Optional[float]:
    """The number at ``key`` (``default`` when absent; None allowed when ``optional``)."""
    value = _get(state, key, default)
    if value is None and optional:
        return None
    if not _is_number(value):
        raise ValueError(f"'{key}' is {value!r:.60}, not a number")
    return float(value)


def whole(state: Mapping[str, Any], key: str, default: Any = _REQUIRED, optional: bool = False,
          minimum: Optional[int] = None) -> Optional[int]:
    """The whole number at ``key``, at least ``minimum`` (``default`` when absent; None allowed when
    ``optional``)."""
    value = _get(state, key, default)
    if value is None and optional:
        return None
    if not _is_whole(value) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"'{key}' is {value!r:.60}, not a whole number{bound}")
    return int(value)


def number_map(state: Mapping[str, Any], key: str, default: Any = _REQUIRED) -> Dict[str, float]:
    """The dict of names to numbers at ``key``."""
    value = _get(state, key, default)
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and _is_number(v) for k, v in value.items()):
        raise ValueError(f"'{key}' is not a dict of names to numbers")
    return {k: float(v) for k, v in value.items()}


def rows(state: Mapping[str, Any], key: str, width: int, default: Any = _REQUIRED) -> List[Tuple[float, ...]]:
    """The list of ``width``-tuples of numbers at ``key``."""
    value = _get(state, key, default)
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(row, (list, tuple)) and len(row) == width and all(_is_number(v) for v in row) for row in value
    ):
        raise ValueError(f"'{key}' is not a list of {width} numbers per row")
    return [tuple(row) for row in value]


def tensors(state: Mapping[str, Any], key: str) -> Dict[str, torch.Tensor]:
    """The non-empty dict of names to tensors at ``key``."""
    value = _get(state, key, _REQUIRED)
    if not isinstance(value, Mapping) or not value or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items()
    ):
        raise ValueError(f"'{key}' is not a dict of tensors")
    return dict(value)
