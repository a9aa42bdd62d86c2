"""Scheduling time: the waits for resources around a run (lifecycle).

A run may carry ``job_submitted`` events (the scheduler accepted the job, or
requeued it) and ``resources_granted`` events (every host of an attempt is
placed). The time from a submission to its grant is **scheduling** time:

* the first wait, before the first attempt, lies before the runtime
  lifetime; the lifetime then starts at the first grant (the job holds its
  resources from there; the time up to the first job start is ``OTHER``);
* a wait after a requeue, inside a gap between attempts, is carved out of the
  runtime partition like idle time: infrastructure recovery keeps the time
  before the requeue and from the grant to the next job start.

So runtime goodput is over the time the job held its resources, and
scheduling goodput x runtime goodput = ETTR exactly. A submission without a
recorded grant is granted at the next job start; one still waiting at the
query time waits until then. Runs without scheduling events are unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

import numpy as np

from goodput_core.timeline.intervals import union

__all__ = ["SCHEDULING", "SchedulingWaits", "scheduling_waits"]

#: The span code of a wait for resources inside the lifetime (beside the
#: timeline's IDLE = 100): ``Calculator.spans`` labels it ``SCHEDULING``.
SCHEDULING = 101


@dataclasses.dataclass(frozen=True)
class SchedulingWaits:
    """The waits for resources of a run.

    Attributes:
      waits: ``[(submitted, granted), ...]`` in time order (the last may end at
        the query time when nothing was granted yet).
      first_submission: the first ``job_submitted`` time (None: none recorded).
      held_start: the first grant when it precedes the first job start (the
        runtime lifetime starts there), else None.
      submissions: ``job_submitted`` events (the first one and the requeues).
    """

    waits: List[Tuple[float, float]]
    first_submission: Optional[float]
    held_start: Optional[float]
    submissions: int = 0

    def __bool__(self) -> bool:
        return bool(self.waits)

    def inside(self, start: float, end: float) -> List[Tuple[float, float]]:
        """The waits clipped to ``[start, end]`` (those that overlap it)."""
        out = []
        for a, b in self.waits:
            a, b = max(a, start), min(b, end)
            if b > a:
                out.append((a, b))
        return out

    def seconds(self, start: float = -np.inf, end: float = np.inf,
                minus: Tuple[np.ndarray, np.ndarray] = (np.empty(0), np.empty(0))) -> float:
        """Scheduling seconds inside ``[start, end]``, less their overlap with the
        intervals ``minus`` (``(starts, ends)``: idle gaps, user exclusions)."""
        inside = self.inside(start, end)
        if not inside:
            return 0.0
        ws, we = union([a for a, _ in inside], [b for _, b in inside])
        total = float((we - ws).sum())
        ms, me = minus
        if len(ms):
            ms, me = union(ms, me)
            for a, b in zip(ws.tolist(), we.tolist()):
                total -= float((np.clip(me, a, b) - np.clip(ms, a, b)).sum())
        return max(total, 0.0)


_NONE = SchedulingWaits([], None, None)


def scheduling_waits(tables, job_starts: np.ndarray, now: float) -> SchedulingWaits:
    """The waits of a run from its event tables.

    Args:
      tables: the timeline's EventTables (``submitted`` and ``granted`` tables).
      job_starts: the attempts' job start times, sorted.
      now: the query time (a wait with no grant and no later job start ends here).
    """
    sub = np.asarray(tables["submitted"]["t"], np.float64)
    if not len(sub):
        return _NONE
    grant = np.asarray(tables["granted"]["t"], np.float64)
    waits = []
    for i, s in enumerate(sub.tolist()):
        nxt = sub[i + 1] if i + 1 < len(sub) else np.inf
        # the grant of this submission: the first grant (else job start) before the next one
        g = _first_in(grant, s, nxt)
        if g is None:
            g = _first_in(job_starts, s, nxt)
        if g is None:
            g = min(now, nxt) if nxt > s else s
        if g > s:
            waits.append((float(s), float(g)))
    held = None
    if len(job_starts):  # the first grant at or after the first submission, before the start
        g0 = _first_in(grant, float(sub[0]), float(job_starts[0]))
        held = g0
    return SchedulingWaits(waits, float(sub[0]), held, len(sub))


def _first_in(times: np.ndarray, lo: float, hi: float) -> Optional[float]:
    """The first of the sorted ``times`` within ``[lo, hi)``, or None."""
    i = int(np.searchsorted(times, lo, side="left"))
    if i < len(times) and times[i] < hi:
        return float(times[i])
    return None
