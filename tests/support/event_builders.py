"""Hand-built events for calculator tests: ``ev(kind, t, step, **extra)`` and
a calculator fed with them."""

from __future__ import annotations

from goodput_core.calculator import Calculator
from goodput_core.events import EventRecord

RUN = "run"


def ev(kind, t, step=None, **extra) -> EventRecord:
    """An event of run :data:`RUN` at time ``t``."""
    return EventRecord(RUN, int(kind), float(t), step, extra or None)


def calc_of(events, now: float = 1000.0) -> Calculator:
    """A calculator holding ``events``, its clock frozen at ``now``."""
    c = Calculator(clock=lambda: now)
    c.add(events)
    return c
