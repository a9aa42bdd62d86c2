"""Attempts and segments (semantics.md rules 1-4).

An *attempt* runs from a job start to the next job start; it is *closed*
when a job end falls inside it (its last one ends it), *crashed* when it has
steps, no job end and a later attempt exists, *open* when it is the last one
and has no job end.

A *segment* is a run of step starts inside one attempt with strictly
increasing step numbers. Segments are kept in a :class:`SegmentTable`
(columns of numpy arrays, one row per segment, in time order) that the
timeline extends incrementally: rows whose steps all lie before the freeze
time are final except for the last of them, which is *reopened* (its last
step's close and the restart that follows it may still change).

Readings of the rules where semantics.md leaves room (each is tested in
tests/core/timeline/test_semantics_rules.py):

* "already recorded" (rule 2) means "not beyond the previous segment's last
  step", so a restart inside a sparsely logged span counts; a segment that
  follows a crashed attempt is a restart even if an attempt without steps
  came in between.
* A segment's last step is closed by its step end, else (last segment of a
  closed attempt) by the job end, else (crash) by the disruption time. A
  crash-closed step is not *completed* (max_productive_step).
* Recovery after a crash starts at the disruption time when one was
  recorded after the last step start, else at the last step's recorded end,
  else at the last step's start.
* Before a restart inside one attempt (no new job start), an unclosed last
  step is no span: its time is OTHER or whatever intervals label it.
* A sparse span of steps ``a .. b-1`` is wasted when ``a >= r`` (spans are
  wasted whole, rule 4).
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

__all__ = ["Attempts", "SegmentTable", "CLOSE_NONE", "CLOSE_STEP_END", "CLOSE_JOB_END",
           "CLOSE_DISRUPTION"]

CLOSE_NONE, CLOSE_STEP_END, CLOSE_JOB_END, CLOSE_DISRUPTION = 0, 1, 2, 3
_INT_COLS = ("i0", "i1", "att", "w", "next_r")
_BOOL_COLS = ("restart", "crashed", "is_open")
_FLOAT_COLS = ("close", "rec_start", "region_end", "prod_end")
_KIND_COL = "close_kind"
NO_RESTART = np.iinfo(np.int64).max


class Attempts:
    """Job starts, each attempt's end (NaN when none) and idle gaps."""

    def __init__(self, job_start: np.ndarray, job_end: np.ndarray):
        self.start = job_start
        n = len(job_start)
        self.end = np.full(n, np.nan)
        if n and len(job_end):
            k = np.searchsorted(job_start, job_end, side="right") - 1
            ok = k >= 0
            k, je = k[ok], job_end[ok]
            if len(k):  # job ends are sorted: the last one of each attempt wins
                last = np.append(k[1:] != k[:-1], True)
                self.end[k[last]] = je[last]
        self.outside_ends = int((np.searchsorted(job_start, job_end, side="right") == 0).sum()) \
            if len(job_end) else 0
        self.next_start = np.append(job_start[1:], np.nan)

    def __len__(self) -> int:
        return len(self.start)

    def of(self, t: np.ndarray) -> np.ndarray:
        """Attempt index of each time, -1 outside every attempt's active part."""
        if not len(self.start):
            return np.full(len(t), -1, np.int64)
        a = np.searchsorted(self.start, t, side="right") - 1
        aa = np.maximum(a, 0)
        ended = self.end[aa] <= t  # NaN (no end) compares False
        return np.where((a >= 0) & ~ended, a, -1)

    def idle(self) -> Tuple[np.ndarray, np.ndarray]:
        """Gaps between an explicit job end and the next job start."""
        ok = ~np.isnan(self.end) & ~np.isnan(self.next_start)
        return self.end[ok], self.next_start[ok]

    def lifetime_end(self, now: float) -> float:
        """The last job end, or ``now`` while the last attempt is open."""
        last = self.end[-1]
        return float(last) if not np.isnan(last) else float(now)


class SegmentTable:
    """One row per segment; see the module docstring."""

    def __init__(self):
        self.cols: Dict[str, np.ndarray] = {}
        self.clear()

    def clear(self) -> None:
        self.cols = {c: np.empty(0, np.int64) for c in _INT_COLS}
        self.cols.update({c: np.empty(0, bool) for c in _BOOL_COLS})
        self.cols.update({c: np.empty(0, np.float64) for c in _FLOAT_COLS})
        self.cols[_KIND_COL] = np.empty(0, np.int8)

    def __len__(self) -> int:
        return len(self.cols["i0"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.cols.values())

    def rebuild_tail(self, tables, att: Attempts, F: float) -> int:
        """Recomputes the rows that steps at or after ``F`` can change.

        Args:
          tables: the EventTables.
          att: the attempts.
          F: the freeze time.

        Returns:
          The index of the first recomputed row (rows before it are final).
        """
        st = tables["step_start"]
        t, s = st["t"], st["step"]
        iF = int(np.searchsorted(t, F, side="left"))
        keep = int(np.searchsorted(self.cols["i0"], iF, side="left"))
        first = max(keep - 1, 0)  # the reopened row
        old = {c: a[:first] for c, a in self.cols.items()}
        reopened = None
        if keep:
            reopened = {c: self.cols[c][keep - 1] for c in ("i0", "att", "restart")}
            reopened["i1"] = min(int(self.cols["i1"][keep - 1]), iF - 1)
        # the tail's valid steps (inside an attempt's active part) are index
        # ranges, one per attempt: no per-step array of attempt numbers (at
        # millions of steps each is tens of MiB)
        lo, hi, r_att = _active_ranges(t, att, iF)
        i0, seg_att = _breaks(s, lo, hi, r_att)
        if len(lo) and reopened is not None:
            # the first valid step goes on the reopened segment unless it starts a new one
            v0 = lo[0]
            if not (r_att[0] != reopened["att"] or s[v0] <= s[reopened["i1"]]):
                i0, seg_att = i0[1:], seg_att[1:]
        # a segment ends at the step before the next one starts, or at its range's end
        end = hi[np.searchsorted(lo, i0, side="right") - 1] if len(i0) else i0
        i1 = np.minimum(np.append(i0[1:], end[-1:]), end) - 1 if len(i0) else i0
        if reopened is not None:
            if len(i0) and i0[0] > lo[0]:  # valid steps before the first new segment
                ext = min(int(i0[0]), int(hi[0])) - 1
            elif len(lo) and not len(i0):
                ext = int(hi[-1]) - 1
            else:
                ext = reopened["i1"]
            i0 = np.insert(i0, 0, reopened["i0"])
            i1 = np.insert(i1, 0, ext)
            seg_att = np.insert(seg_att, 0, reopened["att"])
        rows = {"i0": i0.astype(np.int64), "i1": i1.astype(np.int64),
                "att": seg_att.astype(np.int64)}
        self._restarts(rows, old, reopened, s, att)
        self._closes(rows, tables, att)
        self._wasted(rows, s)
        self.cols = {c: np.concatenate((old[c], rows[c].astype(old[c].dtype))) for c in old}
        self._tail_invalid = _outside(t, lo, hi, iF)
        return first

    @property
    def tail_invalid_times(self) -> np.ndarray:
        """Times of tail step starts outside every attempt (counted as skipped)."""
        return getattr(self, "_tail_invalid", np.empty(0))

    # ------------------------------------------------------------- helpers
    def _restarts(self, rows, old, reopened, s, att: Attempts) -> None:
        """Rule 2: a new segment is a restart when it re-records progress or
        follows a segment whose attempt crashed."""
        n = len(rows["i0"])
        restart = np.zeros(n, bool)
        if n:
            prev_i1 = np.empty(n, np.int64)
            prev_att = np.empty(n, np.int64)
            prev_i1[1:], prev_att[1:] = rows["i1"][:-1], rows["att"][:-1]
            has_prev = np.ones(n, bool)
            if reopened is not None:
                restart[0] = bool(reopened["restart"])
                has_prev[0] = False
            elif len(old["i0"]):
                prev_i1[0], prev_att[0] = old["i1"][-1], old["att"][-1]
            else:
                has_prev[0] = False
            pi1 = np.where(has_prev, prev_i1, 0)
            pa = np.where(has_prev, prev_att, 0)
            redo = s[rows["i0"]] <= s[pi1]
            crashed_prev = (pa != rows["att"]) & np.isnan(att.end[pa]) if len(att) else redo
            restart = np.where(has_prev, redo | crashed_prev, restart)
        rows["restart"] = restart

    def _closes(self, rows, tables, att: Attempts) -> None:
        """Rules 3-4: how each segment's last step ends, recovery, regions."""
        st = tables["step_start"]
        t, s = st["t"], st["step"]
        i0, i1, a = rows["i0"], rows["i1"], rows["att"]
        n = len(i0)
        tm, sm = t[i1], s[i1]
        last_in_att = np.ones(n, bool)
        last_in_att[:-1] = a[1:] != a[:-1]
        next_t0 = np.full(n, np.nan)
        next_t0[:-1] = np.where(last_in_att[:-1], np.nan, t[i0[1:]])
        aend = att.end[a] if n else np.empty(0)
        anext = att.next_start[a] if n else np.empty(0)
        crashed = last_in_att & np.isnan(aend) & ~np.isnan(anext)
        is_open = last_in_att & np.isnan(aend) & np.isnan(anext)
        limit = np.where(~last_in_att, next_t0,
                         np.where(~np.isnan(aend), aend, np.where(crashed, anext, np.inf)))
        se_t = _first_step_end(tables["step_end"], sm, tm, limit)
        d = _first_at_or_after(tables["disruption"]["t"], tm)
        d = np.where(crashed & (d < anext), d, np.nan)
        kind = np.full(n, CLOSE_NONE, np.int8)
        close = np.full(n, np.nan)
        for mask, value, code in (
                (~np.isnan(d), d, CLOSE_DISRUPTION),
                (last_in_att & ~np.isnan(aend), aend, CLOSE_JOB_END),
                (~np.isnan(se_t), se_t, CLOSE_STEP_END)):  # lowest precedence first
            close = np.where(mask, value, close)
            kind[mask] = code
        closed = ~np.isnan(close)
        rows["close"], rows["close_kind"] = close, kind
        rows["crashed"], rows["is_open"] = crashed, is_open
        # recovery from the disruption when known, else from the end of the
        # last step when it was recorded, else from the last step's start
        rec = np.where(~np.isnan(d), d, np.where(kind == CLOSE_STEP_END, close, tm))
        rows["rec_start"] = np.where(crashed, rec, np.nan)
        rows["prod_end"] = np.where(closed, close, tm)
        # where loads count as overlapped (rule 7): inside step spans, and in
        # the last step of an open or crashed attempt
        rows["region_end"] = np.where(closed, close, np.where(
            crashed, anext, np.where(is_open, np.inf, tm)))

    def _wasted(self, rows, s) -> None:
        """Rule 4: in the segment before a restart at step r, the spans of
        steps >= r are wasted; ``w`` is the first wasted step's index."""
        i0, i1 = rows["i0"], rows["i1"]
        n = len(i0)
        w = i1 + 1
        next_r = np.full(n, NO_RESTART, np.int64)
        if n > 1:
            nr = rows["restart"][1:]
            next_r[:-1] = np.where(nr, s[i0[1:]], NO_RESTART)
        for k in np.flatnonzero(next_r != NO_RESTART).tolist():
            lo, hi = int(i0[k]), int(i1[k]) + 1
            w[k] = lo + int(np.searchsorted(s[lo:hi], next_r[k], side="left"))
        rows["w"], rows["next_r"] = w, next_r


def _active_ranges(t: np.ndarray, att: Attempts, iF: int):
    """``(lo, hi, attempt)`` of the non-empty index ranges ``[lo, hi)`` of
    sorted step times ``t[iF:]`` inside an attempt's active part (from its
    job start to its job end, else to the next job start; as ``att.of``)."""
    n = len(att)
    if not n:
        e = np.empty(0, np.int64)
        return e, e, e
    lo = np.searchsorted(t, att.start, side="left")
    hi = np.searchsorted(t, att.next_start, side="left")  # NaN (none) sorts last
    ended = ~np.isnan(att.end)
    hi[ended] = np.minimum(hi[ended], np.searchsorted(t, att.end[ended], side="left"))
    np.maximum(lo, iF, out=lo)
    keep = np.flatnonzero(hi > lo)
    return lo[keep].astype(np.int64), hi[keep].astype(np.int64), keep.astype(np.int64)


def _breaks(s: np.ndarray, lo: np.ndarray, hi: np.ndarray, r_att: np.ndarray):
    """``(first index, attempt)`` of each segment in the ranges: at each
    range's start and where the step number does not increase."""
    if not len(lo):
        return lo, r_att
    a, b = int(lo[0]), int(hi[-1])
    down = np.flatnonzero(s[a + 1:b] <= s[a:b - 1])
    down += a + 1
    r = np.searchsorted(lo, down, side="right") - 1  # (every down index is >= lo[0])
    inner = (down > lo[r]) & (down < hi[r])
    i0 = np.concatenate((lo, down[inner]))
    k = np.concatenate((r_att, r_att[r[inner]]))
    order = np.argsort(i0, kind="stable")
    return i0[order], k[order]


def _outside(t: np.ndarray, lo: np.ndarray, hi: np.ndarray, iF: int) -> np.ndarray:
    """The times of ``t[iF:]`` outside the ranges (sorted, disjoint)."""
    mark = np.zeros(len(t) - iF + 1, np.int8)
    mark[lo - iF] += 1
    mark[hi - iF] -= 1
    inside = np.cumsum(mark[:-1], dtype=np.int8).astype(bool)
    return t[iF:][~inside]


def _first_at_or_after(times: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The first of sorted ``times`` at or after each ``t`` (NaN when none)."""
    if not len(times):
        return np.full(len(t), np.nan)
    j = np.searchsorted(times, t, side="left")
    return np.where(j < len(times), times[np.minimum(j, len(times) - 1)], np.nan)


def _first_step_end(table, steps: np.ndarray, after: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Earliest step end recorded for each ``steps[i]`` in ``[after[i], limit[i])``.

    Vectorised with integer keys (step rank, time rank) so that hostile
    streams with many segments stay fast. Returns NaN where there is none.
    """
    n = len(steps)
    if not n or not len(table):
        return np.full(n, np.nan)
    et, es = table["t"], table["step"]
    lo = int(np.searchsorted(et, np.min(after), side="left"))
    et, es = et[lo:], es[lo:]
    m = len(et)
    if not m:
        return np.full(n, np.nan)
    uniq, rank = np.unique(es, return_inverse=True)
    keys = np.sort(rank.astype(np.int64) * (m + 1) + np.arange(m))
    g = np.searchsorted(uniq, steps)
    known = (g < len(uniq)) & (uniq[np.minimum(g, len(uniq) - 1)] == steps)
    q = g.astype(np.int64) * (m + 1) + np.searchsorted(et, after, side="left")
    raw = np.searchsorted(keys, q, side="left")
    pos = np.minimum(raw, m - 1)
    hit = known & (raw < m) & (keys[pos] // (m + 1) == g)
    found = et[keys[pos] % (m + 1)]
    return np.where(hit & (found < limit), found, np.nan)
