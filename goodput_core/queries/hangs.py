"""Hangs as the calculator reports them (docs/insights.md, "Hang detection").

The watchdog (:mod:`goodput_core.record.watchdog`) records a ``hang`` event when no
step or phase started or ended for too long, and a ``hang_end`` event when
progress resumes. A hang's span runs from the time the hung step should have
ended (its last progress + the expected step time) to the end of the hang;
inside the partition that time is the ``HANG`` bucket, below infrastructure
recovery, wasted progress and every phase (``buckets.PRIORITY``): a hang that
ends in a crash is part of the recovery from that crash, and a hang never
takes a phase's time.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

import numpy as np

from goodput_core.record.stacks import hung_thread
from goodput_core.timeline.buckets import BadputType
from goodput_core.timeline.liveness import lifetime_end

__all__ = ["Hang", "hangs_at", "hangs_of_run", "counted_as_hang"]

ENDED_BY_PROGRESS = "progress"
ENDED_BY_RESTART = "restart"
STILL_OPEN = "open"


@dataclasses.dataclass(frozen=True)
class Hang:
    """One hang of a run.

    Attributes:
      step: the step that hung (the last one that started), or None.
      last_progress: when a step or phase last started or ended before the hang.
      start: when the hung step should have ended (the span's start).
      detected: when the watchdog noticed.
      end: when progress resumed or the job restarted; None while open.
      ended_by: ``"progress"``, ``"restart"`` (the job was restarted: the
        time is infrastructure recovery) or ``"open"``.
      seconds: the part of ``[start, end)`` (``[start, now)`` while open) that
        is the ``HANG`` bucket: all of it, except where recovery or wasted
        progress outranks it (a hang ended by a crash and a restart), so the
        seconds of ``hangs()`` add up to the bucket at every instant.
      stack: the threads' stacks at detection (:mod:`goodput_core.record.stacks`:
        the thread that recorded the last step first).
    """

    step: Optional[int]
    last_progress: float
    start: float
    detected: float
    end: Optional[float]
    ended_by: str
    seconds: float
    stack: str

    @property
    def thread(self) -> Optional[str]:
        """The thread that recorded the last step before the hang (the one
        that hung; in a summary of an earlier version, the first thread that is
        not goodput's own), or None without a stack."""
        return hung_thread(self.stack)[0]

    def top_frames(self, n: int = 3) -> List[str]:
        """The innermost ``n`` frames of :attr:`thread` (``file.py:line function``),
        innermost first: where the training loop is stuck."""
        return hung_thread(self.stack)[1][:n]


def counted_as_hang(timeline, hang: Hang, now: float) -> Hang:
    """``hang`` with ``seconds`` = the HANG bucket's seconds inside its span
    (semantics rule 14: the bucket, ``hangs()`` and every exporter agree)."""
    stop = max(min(now if hang.end is None else hang.end, now), hang.start)
    got = timeline.measure(np.array([hang.start]), np.array([stop]))
    return dataclasses.replace(hang, seconds=float(got.get(int(BadputType.HANG), 0.0)))


def hangs_of_run(tables, attempt_starts: np.ndarray, now: float) -> List[Hang]:
    """The hangs of a run, in time order.

    Args:
      tables: the run's :class:`~goodput_core.timeline.ingest.EventTables`.
      attempt_starts: job start times, sorted.
      now: the query time (the length of an open hang).
    """
    if not tables.hangs:
        return []
    table = tables["hang"]
    ends = np.sort(table["t"][table["e"] == 1])
    out = []
    for h in sorted(tables.hangs, key=lambda h: h["start"]):
        j = int(np.searchsorted(ends, h["detected"], side="left"))
        end = float(ends[j]) if j < len(ends) else None
        k = int(np.searchsorted(attempt_starts, h["detected"], side="right"))
        restart = float(attempt_starts[k]) if k < len(attempt_starts) else None
        if restart is not None and (end is None or restart < end):
            end, ended_by = restart, ENDED_BY_RESTART
        elif end is not None:
            ended_by = ENDED_BY_PROGRESS
        else:
            ended_by = STILL_OPEN
        stop = now if end is None else end
        out.append(Hang(h["step"], h["last_progress"], h["start"], h["detected"], end, ended_by,
                        max(stop - h["start"], 0.0), h["stack"]))
    return out


def hangs_at(tl, now: float) -> List[Hang]:
    """The hangs of the updated timeline ``tl`` at ``now``, each counted as
    its HANG bucket counts it (an open hang of a stopped run ends where it stopped)."""
    if len(tl.attempts):
        now = min(now, lifetime_end(tl, now))
    return [counted_as_hang(tl, h, now) for h in hangs_of_run(tl.tables, tl.attempts.start, now)]
