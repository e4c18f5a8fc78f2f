"""The one row formatter the file writers share, so every file agrees on every value."""

from __future__ import annotations

import math
from typing import Dict, Mapping, Optional


def scalar_row(scalars: Mapping[str, float]) -> Dict[str, Optional[float]]:
    """``{tag: float}`` with non-finite values (nan, inf) as None: JSON null, an empty CSV cell."""
    row: Dict[str, Optional[float]] = {}
    for tag, value in scalars.items():
        value = float(value)
        row[tag] = value if math.isfinite(value) else None
    return row
