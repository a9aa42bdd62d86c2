"""A window of a run's timeline: its goodput result (with the waits for
resources taken out), the run's lifetime, the restarts and steps up to the
window's end, and the labelled spans. The work behind
:class:`~goodput_core.queries.calculator.Calculator`'s ``window``, ``lifetime``
and ``spans``; every function takes an updated timeline.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Tuple

import numpy as np

from goodput_core.queries.results import GoodputResult, build_result, empty_result
from goodput_core.queries.scheduling import SCHEDULING, scheduling_waits
from goodput_core.timeline.buckets import CUSTOM_BASE, IDLE, PRODUCTIVE, BadputType
from goodput_core.timeline.intervals import paint
from goodput_core.timeline.liveness import lifetime_end
from goodput_core.timeline.segments import CLOSE_JOB_END, CLOSE_STEP_END, NO_RESTART
from goodput_core.timeline.spans import Timeline

__all__ = ["labelled_spans", "lifetime_of", "rolling_end", "span_label", "step_summary",
           "window_result"]


def lifetime_of(tl: Timeline, now: float) -> Tuple[float, float]:
    """(first job start, or the first grant before it; last job end or now)."""
    att = tl.attempts
    lo = float(att.start[0])
    held = scheduling_waits(tl.tables, att.start, now).held_start
    if held is not None:
        lo = min(lo, held)
    return lo, max(lifetime_end(tl, now), lo)  # where a stopped run stopped (rule 15)


def rolling_end(tl: Timeline, now: float) -> float:
    """Where rolling windows end (semantics.md rule 10): ``now`` while the run
    runs; the lifetime's end for an ended or stopped run (rule 15), so that a
    finished run's last hour reads the same however late it is read (never
    after ``now``: a query of the past sees the run as it was then)."""
    if not len(tl.attempts):
        return now
    return min(lifetime_of(tl, now)[1], now)


def span_label(code: int, custom_names: List[str]) -> str:
    """The label of a span's bucket code (custom badput by its recorded name)."""
    if code == PRODUCTIVE:
        return "PRODUCTIVE"
    if code == IDLE:
        return "IDLE"
    if code == SCHEDULING:
        return "SCHEDULING"
    if code >= CUSTOM_BASE:
        return f"CUSTOM_BADPUT_EVENTS:{custom_names[code - CUSTOM_BASE]}"
    return BadputType(code).name


def step_summary(tl: Timeline, a: float, b: float) -> Dict[str, int]:
    """Restarts in ``[a, b]``, the last step started by ``b`` and the largest
    kept step by ``b`` (with hindsight: progress later redone is not kept)."""
    seg = tl.segments
    st = tl.tables["step_start"]
    t, s = st["t"], st["step"]
    restarts = tl.stepless_restarts[1]  # rule 2: disrupted attempts without steps
    out = {"disruptions": int(((restarts >= a) & (restarts <= b)).sum()),
           "max_productive_step": 0, "last_step": 0}
    if not len(seg):
        return out
    i0, i1 = seg["i0"], seg["i1"]
    t0 = t[i0]
    out["disruptions"] += int((seg["restart"] & (t0 >= a) & (t0 <= b)).sum())
    sel = t0 <= b
    if not sel.any():
        return out
    i0, i1, next_r = i0[sel], i1[sel], seg["next_r"][sel]
    close, kind = seg["close"][sel], seg["close_kind"][sel]
    j = np.clip(np.searchsorted(t, b, side="right") - 1, i0, i1)
    out["last_step"] = int(s[j[-1]])
    # a step ends (completes) with its step end or the job end, not a crash
    done = ((kind == CLOSE_STEP_END) | (kind == CLOSE_JOB_END)) & (close <= b) & (j == i1)
    completed = np.where(done, s[i1], np.where(j > i0, s[j] - 1, -1))
    kept = np.where(next_r != NO_RESTART, np.minimum(completed, next_r - 1), completed)
    kept = kept[kept >= s[i0]]
    out["max_productive_step"] = int(kept.max()) if len(kept) else 0
    return out


def window_result(tl: Timeline, a: float, b: float, excl: Sequence[Tuple[float, float]],
                  now: float) -> GoodputResult:
    """Goodput over ``[a, b]`` clipped to the lifetime at ``now``, minus ``excl``."""
    if not len(tl.attempts):
        return empty_result(now, tl.skipped(), tl.tables.elastic_seen)
    life = lifetime_of(tl, now)
    wa, wb = max(a, life[0]), max(min(b, life[1]), max(a, life[0]))
    waits = scheduling_waits(tl.tables, tl.attempts.start, now)
    if not waits:
        return build_result(tl, a, b, excl, life, now, step_summary(tl, wa, wb))
    # waits for resources leave the partition like idle time (lifecycle)
    sched = waits.inside(*life)
    r = build_result(tl, a, b, excl + sched, life, now, step_summary(tl, wa, wb))
    idle_s, idle_e = tl.attempts.idle()
    minus = (np.concatenate([idle_s, [x for x, _ in excl]]),
             np.concatenate([idle_e, [y for _, y in excl]]))
    secs = min(waits.seconds(wa, wb, minus), r.excluded_seconds)
    return dataclasses.replace(r, excluded_seconds=r.excluded_seconds - secs,
                               scheduling_seconds=secs)


def labelled_spans(tl: Timeline, lo: float, hi: float, now: float):
    """``(starts, ends, codes, custom names)`` of the spans of ``[lo, hi]``
    (inside the lifetime); waits for resources are their own lane, under idle time."""
    s, e, c = tl.labelled(lo, hi)
    waits = scheduling_waits(tl.tables, tl.attempts.start, now)
    if waits:
        idle = c == IDLE
        ws = np.array([x for x, _ in waits.inside(lo, hi)], np.float64)
        we = np.array([y for _, y in waits.inside(lo, hi)], np.float64)
        s, e, c = paint([(s[idle], e[idle], IDLE), (ws, we, SCHEDULING), (s, e, c)], lo)
    return s, e, c, list(tl.tables.names["custom"])
