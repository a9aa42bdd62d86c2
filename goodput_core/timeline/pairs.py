"""Start and end events of a family paired into intervals (semantics.md rule 7).

Used by the timeline (:mod:`goodput_core.timeline.spans`) for every family of
paired events (initialisation, loads, saves, custom events, ...): per kind
and type, a second start replaces a pending one and an end without a start
is skipped; :func:`trailing_start` finds where new events may still change
the pairing (the timeline's freeze point).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["pairs_of", "trailing_start"]

_E = np.empty(0)
_INF = math.inf


def pairs_of(table, F: float, keyed: bool, skip_times):
    """Pairs start/end events at or after ``F`` (rule 7: per kind and type, a
    second start replaces a pending one, an end without a start is skipped).

    Returns:
      (starts, ends, keys, groups): the intervals, and per key the
      (times, is_end) arrays of its events for the freeze-point search.
    """
    lo = int(np.searchsorted(table["t"], F, side="left"))
    t, e = table["t"][lo:], table["e"][lo:]
    n = len(t)
    if not keyed:  # one key: no key array, and masks rather than index arrays
        # (a run's loads are millions of events: each temporary is tens of MiB)
        start = e == 0
        pair = start[:-1] & ~start[1:]
        replaced = start[:-1] & start[1:]
        orphan = ~start
        orphan[1:] &= ~start[:-1]
        del start
        skip_times["unmatched_start"].append(t[:-1][replaced] if n else _E)
        del replaced
        skip_times["unmatched_end"].append(t[orphan])
        del orphan
        starts, ends = t[:-1][pair], t[1:][pair]
        # zeros are not written out until read (calloc): the key column is free
        return starts, ends, np.zeros(len(starts), np.int32), [(t, e)] if n else []
    key = table["key"][lo:]
    if n:
        order = np.argsort(key, kind="stable")  # keeps (time, arrival) order per key
        t, e, key = t[order], e[order], key[order]
    same = key[1:] == key[:-1]
    start = e == 0
    pair = start[:-1] & ~start[1:] & same
    i = np.flatnonzero(pair)
    replaced = start[:-1] & start[1:] & same
    orphan = ~start
    orphan[1:] &= ~(start[:-1] & same)
    skip_times["unmatched_start"].append(t[:-1][replaced] if n else _E)
    skip_times["unmatched_end"].append(t[orphan])
    groups = []
    if n:
        cut = np.flatnonzero(~same) + 1
        groups = [(gt, ge) for gt, ge in zip(np.split(t, cut), np.split(e, cut))]
    return t[i], t[i + 1], key[i], groups


def trailing_start(t: np.ndarray, e: np.ndarray, F: float) -> float:
    """Earliest start whose pairing can still change when events >= F arrive:
    the run of starts that ends the key's events before ``F`` (if any)."""
    L = int(np.searchsorted(t, F, side="left")) - 1
    if L < 0 or e[L]:
        return _INF
    ends = np.flatnonzero(e[: L + 1])
    return float(t[ends[-1] + 1]) if len(ends) else float(t[0])
