"""How much loading time counted as blocking by default (semantics rule 16).

A load recorded with the native context manager (``with rec.data_loading():``)
is blocking unless declared ``overlapped=True``: it is ``DATA_LOADING_SYNC``
wherever it lies. A prefetching loader recorded that way is undercounted as
productive time otherwise, so the report says how many seconds this rule
counted, and how to change it.
"""

from __future__ import annotations

import numpy as np

from goodput_core.timeline.intervals import union

__all__ = ["blocking_load_seconds", "HOW_TO_CHANGE"]

HOW_TO_CHANGE = ("loads recorded with `with rec.data_loading():` block by default; "
                 "a prefetching loader: `rec.data_loading(overlapped=True)`")


def blocking_load_seconds(tables, a: float, b: float) -> float:
    """Seconds of ``[a, b]`` covered by loads recorded as blocking by default.

    Args:
      tables: a timeline's :class:`~goodput_core.timeline.ingest.EventTables`.
      a, b: the window (already clipped to the lifetime).
    """
    t, e = tables["bload"]["t"], tables["bload"]["e"]
    if len(t) < 2 or not b > a:
        return 0.0
    start = e == 0
    i = np.flatnonzero(start[:-1] & ~start[1:])  # a start followed by its end (rule 7)
    s, f = union(np.maximum(t[i], a), np.minimum(t[i + 1], b))
    return float((f - s).sum())
