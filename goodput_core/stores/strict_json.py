"""Strict JSON for the ``extra`` column of the sqlite store.

Non-finite floats become the strings ``"NaN"``, ``"Infinity"`` and
``"-Infinity"`` (the proto3 JSON spelling Cloud Logging uses), numpy scalars
are stored via ``.item()``, sets as lists, any other object via ``str()``.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["dumps"]


def _finite_only(obj: Any) -> Any:
    """Copy of ``obj`` with non-finite floats replaced by their proto3 JSON strings."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if obj != obj else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {k: _finite_only(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_only(v) for v in obj]
    return obj


def _default(obj: Any) -> Any:
    """JSON fallback: numpy scalars via .item(), sets as lists, anything else as str."""
    item = getattr(obj, "item", None)
    if callable(item):
        try:
            return _finite_only(item())
        except (TypeError, ValueError):
            pass
    return list(obj) if isinstance(obj, (set, frozenset)) else str(obj)


_encode = json.JSONEncoder(allow_nan=False, separators=(",", ":"), default=_default).encode


def dumps(extra: Any) -> str:
    """Encodes an extra dict as strict JSON (see the module docstring)."""
    try:
        return _encode(extra)
    except ValueError as exc:  # a NaN or infinity somewhere: rare, so pay for a copy
        if "ircular" in str(exc):
            raise
        return _encode(_finite_only(extra))
