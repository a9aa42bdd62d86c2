"""An observer's tail (semantics rule 13): the time after an attempt's job
end that a process which only observed recorded as the job's.

A piece with neither a job start nor a step (a process that only observed)
places no attempt and leads nothing. One such piece is the exception: the
watcher of :mod:`goodput_integrations.maxtext.whole_process` waits for the
training process to exit after its graceful job end, then records the custom
badput ``SHUTDOWN`` from that job end to the exit and a job end at the exit.
Its rows are the attempt's **tail**, read as if the lead's own process had
recorded them (as the watcher's in-process fallback does), when:

* the attempt's last lead piece ended at a job end (the first disruption or
  job end at or after its last step start is a job end): after a crash
  there is no tail;
* the observer settled on the lead's index (another host's job end is not
  the job's, nor is its watcher's);
* its first job end after the lead's comes before the job's next attempt
  starts (a process still shutting down when the next attempt began neither
  ends that attempt nor keeps the old one alive);
* it recorded a custom badput start from the lead's job end on, before that
  job end (a bare job end says nothing of the time it would add: the engine
  would count it as the last step's, rule 3).

The tail is the observer's custom badput events from the lead's job end to
its own job end, and that job end; of several observers', the one with the
latest job end (the first in the pieces' order among equals). Used by both
passes of rule 13 (:mod:`.streams` on records, :mod:`.lead_columns` on
columns), given each observer piece's times and events in (time, seq) order.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from typing import List, Optional, Sequence, Tuple

from goodput_core.events import EventRecord, Kind

__all__ = ["observer_tail", "Observer"]

_JOB_END = int(Kind.JOB_END)
_CUSTOM_START = int(Kind.CUSTOM_BADPUT_START)
_TAIL_KINDS = frozenset({_CUSTOM_START, int(Kind.CUSTOM_BADPUT_END)})

#: An observer piece as the rule reads it: its settled index, its times and
#: its events (both in (time, seq) order; rows of other kinds may be among them).
Observer = Tuple[int, Sequence[float], Sequence[EventRecord]]


def observer_tail(lead_end: Optional[float], index: int, observers: Sequence[Observer],
                  until: float = math.inf) -> List[EventRecord]:
    """The tail of an attempt (module docstring).

    Args:
      lead_end: when its last lead piece ended at a job end (None: it did
        not: a crash, or no end yet).
      index: the lead's index.
      observers: the observer pieces that recorded a job end, in the pieces' order.
      until: when the job's next attempt starts (inf: none).

    Returns:
      The tail's events in (time, seq) order; empty when there is none.
    """
    if lead_end is None:
        return []
    best: List[EventRecord] = []
    best_end = -math.inf
    for observer_index, times, events in observers:
        if observer_index != index:
            continue
        lo = bisect_right(times, lead_end)
        x = next((j for j in range(lo, len(events)) if events[j][1] == _JOB_END), None)
        if x is None or not best_end < times[x] < until:
            continue
        a, b = bisect_left(times, lead_end), bisect_right(times, times[x])
        if not any(events[j][1] == _CUSTOM_START and times[j] < times[x] for j in range(a, x)):
            continue
        best = [events[j] for j in range(a, b) if j == x or events[j][1] in _TAIL_KINDS]
        best_end = times[x]
    return best
