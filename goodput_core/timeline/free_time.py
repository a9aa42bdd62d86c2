"""Where a straggler's excess blocking time is carved from the lead's step
(semantics rule 13, :mod:`.stragglers`): the lead's unblocked time in the
step, first where the slowest host blocked, then right after the lead's own
last blocking interval (where it would have computed), then from the step's
start.

:func:`free_time` takes one step; :func:`free_time_by_columns` takes every
step at once with numpy when the lead blocked at most once in each and the
slowest host exactly once, computing the same endpoints with the same float
operations (``max``/``min`` of the same values, ``x + take``)."""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

__all__ = ["EPS", "free_time", "free_time_by_columns", "fill", "carved_per_row"]

EPS = 1e-9  # seconds: below this a straggler's excess is float noise


def _gaps(blocks: List[Tuple[float, float]], a: float, b: float) -> List[Tuple[float, float]]:
    """``[a, b)`` minus ``blocks``, in time order."""
    gaps, cursor = [], a
    for x, y in sorted((max(x, a), min(y, b)) for x, y in blocks if y > a and x < b) + [(b, b)]:
        if x > cursor:
            gaps.append((cursor, x))
        cursor = max(cursor, y)
    return gaps


def free_time(own: List[Tuple[float, float]], where: List[Tuple[float, float]], a: float,
              b: float, need: float) -> List[Tuple[float, float]]:
    """Intervals of the lead's span ``[a, b)`` outside its own blocking time
    ``own`` (clipped to the span), totalling ``need``: first where the
    straggler blocked (``where``), then right after the lead's own last
    blocking interval, then from ``a``."""
    free = _gaps(own, a, b)
    first = []
    for x, y in sorted(where):
        first += [(max(x, u), min(y, v)) for u, v in free if min(y, v) > max(x, u)]
    inside = [(x, y) for x, y in own if y > a and x < b]
    anchor = min(max(y for _, y in inside), b) if inside else a
    rest = sorted((max(x, u), min(y, v)) for x, y in _gaps(first, a, b) for u, v in free
                  if min(y, v) > max(x, u))
    ordered = first + [g for g in rest if g[0] >= anchor] + [g for g in rest if g[0] < anchor]
    return _taken(ordered, need)


def _taken(ordered: List[Tuple[float, float]], need: float) -> List[Tuple[float, float]]:
    """The first ``need`` seconds of the intervals ``ordered``, in that order."""
    out = []
    for x, y in ordered:
        take = min(y - x, need)
        if take > 0:
            out.append((x, x + take))
            need -= take
        if need <= EPS:
            break
    return out


def fill(taken: List[Tuple[float, float]], a: float, b: float, need: float
         ) -> List[Tuple[float, float]]:
    """Intervals of ``[a, b)`` outside ``taken``, from ``a`` on, totalling
    ``need`` (or all there is)."""
    return _taken(_gaps(taken, a, b), need)


def free_time_by_columns(a, b, ox, oy, wx, wy, need):
    """:func:`free_time` for many steps (numpy columns, one row a step) where
    the lead's own blocking is one interval ``[ox, oy)`` inside ``[a, b)``
    (``ox = oy = a``: none) and the straggler's one interval ``[wx, wy)``
    (``wy > wx``).

    The free time is ``G1 = [a, ox)`` and ``G2 = [oy, b)``; the candidates in
    :func:`free_time`'s order are ``W∩G1``, ``W∩G2``, then the rest after
    the anchor ``oy`` (``G2`` before and after ``W``), then the rest before
    it (``G1`` before and after ``W``).

    Returns:
      ``(emit, x, y)``: ``(steps, 6)`` arrays; row ``i``'s carved intervals
      are ``(x, y)`` where ``emit``, in column order.
    """
    g1, g2 = ox > a, b > oy
    cand = [  # (start, end, exists)
        (np.maximum(wx, a), np.minimum(wy, ox), g1),
        (np.maximum(wx, oy), np.minimum(wy, b), g2),
        (oy, np.minimum(b, wx), g2),
        (np.maximum(oy, wy), b, g2),
        (a, np.minimum(ox, wx), g1),
        (np.maximum(a, wy), ox, g1),
    ]
    n = len(a)
    emit = np.zeros((n, 6), dtype=bool)
    xs, ys = np.zeros((n, 6)), np.zeros((n, 6))
    need = need.copy()
    active = need > EPS
    for j, (x, y, exists) in enumerate(cand):
        take = np.minimum(y - x, need)
        on = active & exists & (y > x) & (take > 0)
        emit[:, j] = on
        xs[:, j] = x
        ys[:, j] = x + take
        need = np.where(on, need - take, need)
        active &= need > EPS
    return emit, xs, ys


def carved_per_row(a: np.ndarray, b: np.ndarray, own_meets: np.ndarray, ox: np.ndarray,
                   oy: np.ndarray, wx: np.ndarray, wy: np.ndarray, need: np.ndarray,
                   fits: np.ndarray) -> List[Optional[List[Tuple[float, float]]]]:
    """:func:`free_time_by_columns` of spans ``[a, b)`` where the lead blocked
    at most once (``own_meets``; its interval ``ox``/``oy``) and the slowest
    host once (``wx``/``wy``, shifted to the lead's span), as one list of
    carved intervals per row where ``fits`` (None elsewhere: one by one)."""
    emit, xs, ys = free_time_by_columns(a, b, np.where(own_meets == 1, ox, a),
                                        np.where(own_meets == 1, oy, a), wx, wy, need)
    emit &= fits[:, None]
    counts = emit.sum(axis=1)[fits].tolist()
    xs, ys = xs[emit].tolist(), ys[emit].tolist()  # row by row
    out: List[Optional[List[Tuple[float, float]]]] = [None] * len(a)
    done = 0
    for j, c in zip(np.flatnonzero(fits).tolist(), counts):
        out[j] = list(zip(xs[done:done + c], ys[done:done + c]))
        done += c
    return out
