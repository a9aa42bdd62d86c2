"""Checking the arguments of goodput queries: times and exclusion intervals.

Queries raise ``ValueError`` only for impossible arguments (NaN, a window or
an exclusion that ends before it starts); everything else is data.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from goodput_core.events import to_timestamp

__all__ = ["Interval", "exclusion_intervals", "time_arg"]

Interval = Tuple[Any, Any]


def time_arg(value: Any, name: str) -> float:
    """A query time as float seconds (infinities allowed, NaN not)."""
    if isinstance(value, _dt.datetime):
        return to_timestamp(value)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be POSIX seconds or a datetime, got {value!r}")
    f = float(value)
    if math.isnan(f):
        raise ValueError(f"{name} is NaN")
    return f


def exclusion_intervals(exclude: Optional[Sequence[Interval]]) -> List[Tuple[float, float]]:
    """Validated exclusion intervals."""
    out = []
    for item in exclude or ():
        try:
            x, y = item
        except (TypeError, ValueError):
            raise ValueError(f"an exclusion must be a (start, end) pair, got {item!r}") from None
        x, y = time_arg(x, "exclusion start"), time_arg(y, "exclusion end")
        if y < x:
            raise ValueError(f"exclusion ends before it starts: ({x}, {y})")
        out.append((x, y))
    return out
