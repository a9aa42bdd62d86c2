"""Small builders for hand-derived timeline cases (semantics.md rules).

Events are :class:`~goodput_core.events.EventRecord` of one run; times are
small integers so every expected sum is exact.
"""

from __future__ import annotations

import math
from typing import Dict

from goodput_core.timeline.buckets import BadputType as B
from goodput_core.queries.calculator import Calculator
from goodput_core.events import EventRecord, Kind as K

RUN = "run"


def ev(kind, t, step=None, write_time=math.nan, **extra) -> EventRecord:
    """One event of ``RUN``; ``extra`` is its payload (e.g. an event type)."""
    return EventRecord(RUN, int(kind), float(t), step, extra or None, write_time=write_time)


def orbax(t, entry, write_time=math.nan) -> EventRecord:
    """An Orbax statistics event (the whole dict is the extra payload)."""
    return EventRecord(RUN, int(K.CHECKPOINT_STATS), float(t), entry.get("step"), dict(entry),
                       write_time=write_time)


def steps(times, first=0, step_numbers=None):
    """Step starts at ``times``, numbered from ``first`` (or ``step_numbers``)."""
    nums = step_numbers if step_numbers is not None else range(first, first + len(times))
    return [ev(K.STEP_START, t, s) for s, t in zip(nums, times)]


def run(events, now=1000.0, **kw):
    """The result over ``[a, b]`` (default: the whole lifetime) at query time ``now``."""
    calc = Calculator(clock=lambda: now)
    calc.add(events)
    return calc.window(kw.get("a", -math.inf), kw.get("b", math.inf), exclude=kw.get("exclude"))


def seconds(result) -> Dict[str, float]:
    """Non-zero partition buckets by name, plus PRODUCTIVE (async loads left out)."""
    out = {k.name: v for k, v in result.badput_seconds.items()
           if v and k is not B.DATA_LOADING_ASYNC}
    if result.productive_seconds:
        out["PRODUCTIVE"] = result.productive_seconds
    return out
