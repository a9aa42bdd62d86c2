"""Step times from completion: steps between sync points (semantics.md rule 12).

Under asynchronous dispatch (JAX) a step start is when the step was
*dispatched*; the loop runs ahead of the device, so the time from one start
to the next is how long dispatching took (microseconds), not how long the
step took. Only a wait for the step's result says when work completed: the
JAX adapter's ``sync_every=N`` blocks every N steps and records that step's
end, and ``with rec.step(k):`` around a synchronous step records its end.

A **sync point** is a recorded step end that closes the step started last:
the end of step ``e`` at ``E`` where the last step start at or before ``E``
in the same segment is step ``e`` (the next step may start at the very
instant its predecessor ended) (a second end of that step is not another
sync point; one recorded after the segment was closed by a job end or a
crash is none). A segment whose first sync point closes a step before its
last step start (a sync point in the middle, not only at its end) is
measured **by completion**: the steps after one sync point up to and
including the next share the time between the two evenly, less the phases
inside it::

    step time = (E_j - E_{j-1} - phases in [E_{j-1}, E_j]) / (e_j - e_{j-1})

where the first group of a segment starts at the segment's first step start
(``E_0`` = its time, ``e_0`` = its step - 1). *Phases* are the recorded phases the
partition paints there: checkpoint saves and restores, custom events
(evaluations), compile spans, hangs, accelerator init, preparation and the
elastic buckets (everything but productive time and blocking loads; rule 6's
first-step startup *heuristic* is an estimate, not a recorded phase: a first
step that compiled without a compile span is slow, as under rule 12, and the
ideal step time leaves it out as an outlier). Blocking loads and input
stalls stay in: a step that waits for its batch takes longer. With
``sync_every=1`` (or ``with rec.step(k)``) a group is one step: its time is
from the previous step's end to its own, less the evaluation or save in
between. Steps after a segment's last sync point have no completion time
yet and are not measured.

Other segments keep the spans between step starts (rule 12 as the reference:
the right measure for a synchronous loop that records no step end); the
report says which measure its step times come from
(:func:`step_time_basis`).

Nothing here reads the whole run when it need not: :func:`completion_rows`
looks at each segment's first sync point only, and :func:`group_entries`
starts at the sync point before a given step start (a monitor's cycle costs
what is new).
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from goodput_core.timeline.buckets import IDLE, PRODUCTIVE, BadputType
from goodput_core.timeline.segments import CLOSE_NONE

__all__ = ["completion_rows", "group_entries", "step_time_basis", "SYNC_POINTS", "STEP_STARTS",
           "MIXED", "STEP_TIME_NOTES"]

#: :func:`step_time_basis`: every measured segment by completion (sync points).
SYNC_POINTS = "sync points"
#: ... every one by the spans between step starts (dispatch intervals).
STEP_STARTS = "step starts"
#: ... some of each.
MIXED = "mixed"

#: What each basis means, in a sentence (the report's ``step_time.note``).
STEP_TIME_NOTES = {
    SYNC_POINTS: "sync points: the completed work between recorded step ends "
                 "(evaluations, saves and other phases in between left out)",
    STEP_STARTS: "step starts: the time from one step start to the next; under "
                 "asynchronous dispatch (JAX) these are dispatch intervals, not step "
                 "times: record step ends at sync points (gjax.instrumented(rec, "
                 "sync_every=N), or with rec.step(k) around a step that waits for "
                 "its result)",
    MIXED: "sync points where step ends were recorded, step starts (dispatch "
           "intervals under asynchronous dispatch) elsewhere",
}

# buckets that stay in a step's time: productive time and blocking loads (and
# idle time, which is never inside a segment)
_KEPT = (PRODUCTIVE, int(BadputType.DATA_LOADING_SYNC), IDLE)
_EMPTY_I = np.empty(0, np.int64)
_EMPTY_F = np.empty(0)


def _closing_start(t: np.ndarray, s: np.ndarray, times: np.ndarray, steps: np.ndarray
                   ) -> np.ndarray:
    """Index of the step start each step end closes: the last start at or
    before it, or the one before when the next step started at the same
    instant (-1: none)."""
    k = np.searchsorted(t, times, side="right") - 1
    kk = np.maximum(k, 0)
    tie = (k > 0) & (t[kk] == times) & (s[kk] != steps)
    return k - tie


def _valid(tl, j: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(valid, k, row)`` of step ends ``j`` (indices into the step-end
    table): ``k`` the step start each closes, ``row`` its segment row."""
    st, se, seg = tl.tables["step_start"], tl.tables["step_end"], tl.segments
    t, s = st["t"], st["step"]
    et, es = se["t"], se["step"]
    k = _closing_start(t, s, et[j], es[j])
    i0, i1 = seg["i0"], seg["i1"]
    row = np.searchsorted(i0, k, side="right") - 1
    rr = np.maximum(row, 0)
    kk = np.maximum(k, 0)
    ok = (k >= 0) & (row >= 0) & (k <= i1[rr]) & (es[j] == s[kk])
    # a second end of the same step: the step start before it is the same
    jp = np.maximum(j - 1, 0)
    prev = np.where(j > 0, _closing_start(t, s, et[jp], es[jp]), -1)
    ok &= (j == 0) | (prev != k)
    # the segment's last step: not after a job end or crash closed it
    close, kind = seg["close"][rr], seg["close_kind"][rr]
    ok &= (k < i1[rr]) | (kind == CLOSE_NONE) | (et[j] <= close)
    return ok, k, row


def completion_rows(tl) -> np.ndarray:
    """Per segment row: True where step times come from sync points (the
    module docstring: its first sync point closes a step before its last
    step start)."""
    seg = tl.segments
    n = len(seg)
    out = np.zeros(n, bool)
    se = tl.tables["step_end"]
    if not n or not len(se):
        return out
    t = tl.tables["step_start"]["t"]
    et = se["t"]
    i0, i1 = seg["i0"], seg["i1"]
    j = np.searchsorted(et, t[i0], side="left")  # the first end at or after each row's start
    todo = np.flatnonzero((j < len(et)) & (i1 > i0))
    width = 1
    while len(todo):
        # look at ``width`` ends from each row's next unchecked one (almost always
        # the first is a sync point: then one pass)
        jj = (j[todo][:, None] + np.arange(width)[None, :]).ravel()
        inside = jj < len(et)
        jj = np.minimum(jj, len(et) - 1)
        ok, k, row = _valid(tl, jj)
        rows = np.repeat(todo, width)
        ok &= inside & (row == rows)
        ok = ok.reshape(len(todo), width)
        k = k.reshape(len(todo), width)
        found = ok.any(axis=1)
        first = np.argmax(ok, axis=1)
        kf = k[np.arange(len(todo)), first]
        out[todo[found]] = kf[found] < i1[todo[found]]
        # rows without a sync point in this stretch: go on while their ends
        # still lie before their last step start (past it, none can be mid-segment)
        j[todo] += width
        nxt = todo[~found]
        still = (j[nxt] < len(et))
        still &= et[np.minimum(j[nxt], len(et) - 1)] < t[i1[nxt]]
        todo = nxt[still]
        width = min(width * 4, 4096)
    return out


def _phase_seconds(tl, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per interval ``[a, b]``: the seconds of phases in it (module docstring)."""
    out = np.zeros(len(a))
    for code, il in tl.partition.items():
        if code not in _KEPT and len(il):
            out += il.cum_at(b) - il.cum_at(a)
    return out


def group_entries(tl, lo: int, completion: np.ndarray
                  ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(steps, times, when, final_at)`` of every step start measured by
    completion in the groups that end at or after step start ``lo``.

    Args:
      tl: an up-to-date Timeline.
      lo: the first step start index whose group is wanted.
      completion: :func:`completion_rows` of ``tl``.

    Returns:
      Per listed step start: its step, its time (its group's share), its
      start time (the latest run of a step wins) and the index of the last
      step start at or before its group's end (the group is final once that
      start is before the timeline's freeze point).
    """
    se = tl.tables["step_end"]
    m = len(se)
    if not m or not completion.any():
        return _EMPTY_I, _EMPTY_F, _EMPTY_F, _EMPTY_I
    st, seg = tl.tables["step_start"], tl.segments
    t, s = st["t"], st["step"]
    et, es = se["t"], se["step"]
    i0 = seg["i0"]
    n = len(t)
    j_lo = int(np.searchsorted(et, t[lo], side="left")) if lo < n else m
    # back to the sync point before: the group of start lo begins after it
    j0, width = j_lo, 8
    while j0 > 0:
        j0 = max(j_lo - width, 0)
        ok, _, _ = _valid(tl, np.arange(j0, j_lo))
        if ok.any():
            j0 += int(np.flatnonzero(ok)[-1])
            break
        width *= 4
    j = np.arange(j0, m)
    ok, k, row = _valid(tl, j)
    ok &= completion[np.maximum(row, 0)]
    j, k, row = j[ok], k[ok], row[ok]
    if not len(j):
        return _EMPTY_I, _EMPTY_F, _EMPTY_F, _EMPTY_I
    E, e = et[j], es[j]
    same = np.zeros(len(j), bool)
    same[1:] = row[1:] == row[:-1]
    first_i = i0[row]
    A = np.where(same, np.roll(E, 1), t[first_i])
    e_prev = np.where(same, np.roll(e, 1), s[first_i] - 1)
    g = np.where(same, np.roll(k, 1) + 1, first_i)
    keep = (k >= lo) & (e > e_prev) & (E >= A)
    A, E, e, e_prev, g, k = A[keep], E[keep], e[keep], e_prev[keep], g[keep], k[keep]
    if not len(k):
        return _EMPTY_I, _EMPTY_F, _EMPTY_F, _EMPTY_I
    per_step = np.maximum(E - A - _phase_seconds(tl, A, E), 0.0)
    per_step /= (e - e_prev)
    counts = k - g + 1
    # every step start g..k of each group, in order
    idx = np.repeat(k - np.cumsum(counts) + 1, counts) + np.arange(int(counts.sum()))
    return s[idx], np.repeat(per_step, counts), t[idx], np.repeat(k, counts)


def step_time_basis(tl, completion: Optional[np.ndarray] = None) -> Optional[str]:
    """Where a timeline's step times come from: :data:`SYNC_POINTS`,
    :data:`STEP_STARTS` or :data:`MIXED` (None without a segment of two steps
    or a closed step)."""
    seg = tl.segments
    if not len(seg):
        return None
    completion = completion_rows(tl) if completion is None else completion
    measured = (seg["i1"] > seg["i0"]) | (seg["close_kind"] != CLOSE_NONE)
    if not measured.any():
        return None
    by_sync = completion[measured]
    if by_sync.all():
        return SYNC_POINTS
    return MIXED if by_sync.any() else STEP_STARTS
