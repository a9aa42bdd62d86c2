"""Phases still open at the query time (semantics.md rule 14).

A save, restore, custom event, compile, init or prep block, load or hang
that has started and has not ended yet is its own bucket up to the query
time, with the usual priority: not ``OTHER``. The timeline paints such a
phase as an interval with no end of its own; the query clips it to the
lifetime (the query time, or where a stopped attempt ends, rule 15), so
the spans stay independent of the query time and incremental updates keep
working (a pending start already holds the freeze time back, see
:mod:`goodput_core.timeline.spans`).

An open phase cannot outlive the evidence that it is over: it ends at the
next step start after it (the loop went on: the end event was lost, or the
phase did not block), and at the end of its attempt: its job end or, for an
attempt that was restarted, its last sign of life (rule 15: its last event
or heartbeat, or the disruption that was its last event), where the
process was last known to be in that phase. In the last attempt the query
clips it (the query time, or where a stopped attempt stopped: the same
last sign of life), so its figures do not change when a restart follows.
"""

from __future__ import annotations

import math
from typing import Callable, Tuple

import numpy as np

from goodput_core.timeline.liveness import attempt_lives
from goodput_core.timeline.segments import Attempts

__all__ = ["open_phase_limits", "with_open_phases", "open_starts"]

_INF = math.inf


def open_phase_limits(tables, att: Attempts) -> Callable[[np.ndarray], np.ndarray]:
    """A function: start times of open phases -> where each must end at the latest.

    Args:
      tables: the run's event tables.
      att: the run's attempts.
    """
    step_starts = tables["step_start"]["t"]
    cache = []  # the attempts' ends, computed on first use (most updates have no open phase)

    def attempt_ends() -> np.ndarray:
        if not cache:
            signs = attempt_lives(tables, att).last_signs()
            restarted = np.minimum(att.next_start, np.where(np.isnan(signs), -_INF, signs))
            ends = np.where(np.isnan(att.end), restarted, att.end)
            cache.append(np.where(np.isnan(ends), _INF, ends))
        return cache[0]

    def limit(s: np.ndarray) -> np.ndarray:
        s = np.asarray(s, np.float64)
        if not len(s):
            return s
        ends = attempt_ends()
        a = att.of(s)
        out = np.where(a >= 0, ends[np.maximum(a, 0)], s)  # outside every attempt: nothing
        if len(step_starts):
            j = np.searchsorted(step_starts, s, side="right")
            nxt = np.where(j < len(step_starts), step_starts[np.minimum(j, len(step_starts) - 1)],
                           _INF)
            out = np.minimum(out, nxt)
        return out

    return limit


def open_starts(table, F: float, keyed: bool) -> Tuple[np.ndarray, np.ndarray]:
    """``(times, keys)`` of the starts at or after ``F`` that no end follows
    (per key for keyed families; the last start of a run of starts wins, as
    in the pairing of rule 7)."""
    lo = int(np.searchsorted(table["t"], F, side="left"))
    t, e = table["t"][lo:], table["e"][lo:]
    if not len(t):
        return np.empty(0), np.empty(0, np.int32)
    if not keyed:  # one key: only the very last event can be an open start
        return (t[-1:], np.zeros(1, np.int32)) if e[-1] == 0 else (t[:0], np.empty(0, np.int32))
    key = table["key"][lo:]
    order = np.argsort(key, kind="stable")  # (time, arrival) order per key
    t, e, key = t[order], e[order], key[order]
    last = np.append(key[1:] != key[:-1], True)  # the last event of each key
    sel = last & (e == 0)
    return t[sel], key[sel]


def with_open_phases(pairs, table, F: float, keyed: bool,
                     limit: Callable[[np.ndarray], np.ndarray]):
    """``pairs`` (from the timeline's pairing) plus the open phases of ``table``
    as intervals ending at their limit (infinite while nothing bounds them)."""
    s, k = open_starts(table, F, keyed)
    if not len(s):
        return pairs
    e = limit(s)
    ok = e > s
    starts, ends, keys = pairs[:3]
    return (np.concatenate((starts, s[ok])), np.concatenate((ends, e[ok])),
            np.concatenate((keys, k[ok].astype(keys.dtype, copy=False))), *pairs[3:])
