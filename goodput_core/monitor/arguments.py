"""The monitor's arguments: validated seconds and rolling-window sizes, and the
marker of "the constructor's deadline" (the loop's ``flush``/``stop``)."""

from __future__ import annotations

import math
from typing import Any, Iterable, List, Sequence, Tuple

__all__ = ["DEFAULT", "parse_windows", "positive", "windows"]


class _Default:
    """The 'use the constructor's value' marker (None means 'no deadline')."""

    def __repr__(self) -> str:
        return "<final_flush_timeout_s>"


#: ``flush()``/``stop()``: use the constructor's deadline.
DEFAULT: Any = _Default()


def positive(value: Any, name: str) -> float:
    """``value`` as positive finite seconds (ValueError naming ``name`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            0 < float(value) < math.inf):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def windows(sizes: Iterable[Any]) -> Tuple[Any, ...]:
    """Validated window sizes; integral ones as int (snapshot keys, tag names)."""
    out: List[Any] = []
    for s in sizes:
        f = positive(s, "a rolling window size")
        key = int(f) if f.is_integer() else f
        if key not in out:
            out.append(key)
    return tuple(out)


def parse_windows(text: str) -> Sequence[Any]:
    """Parses ``"60,3600"`` (seconds) for the command line.

    Raises:
      ValueError: an empty or non-positive size.
    """
    return windows(float(x) for x in text.split(",") if x.strip())
