"""The many-writers rebuild reads events by columns (grouping, pieces, kind
filters, stalls slotted in by bisection): on random runs written by many
processes it returns exactly what the per-event pass it replaced returned,
the same events in the same order.

The oracle is that earlier pass, kept in tests/support/lead_events_before.py:
rule 13 with stragglers has no independent reference cheap enough to write,
and the rewrite's claim is precisely "no result changes". The rule itself is
checked by hand-derived figures in test_many_writers.py."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from goodput_core.events import EventRecord, Kind
from goodput_core.timeline.streams import lead_events, stream_indices
from tests.support import lead_events_before as before

_BLOCKS = [(Kind.BLOCKING_LOAD_START, Kind.BLOCKING_LOAD_END),
           (Kind.INPUT_STALL_START, Kind.INPUT_STALL_END)]


def _host_events(rnd: random.Random, index: int, host: str, t0: float) -> list:
    """One host's attempts: a job start (maybe under index 0 before it knows
    its own), steps on a coarse time grid (ties with other hosts), blocking
    loads and stalls of random lengths, step ends, metrics, a disruption, a
    job end; restarts under a new pid or the same one."""
    out, seq, t = [], 0, t0
    pid = rnd.randrange(1, 5)
    for _attempt in range(rnd.randint(1, 3)):
        def ev(kind, when, step=None, idx=index, extra=None):
            nonlocal seq
            seq += rnd.choice((1, 1, 1, 0))  # a repeated seq now and then
            write = when if rnd.random() < 0.9 else math.nan
            return EventRecord("r", int(kind), when, step, extra, idx, host, pid, "a", seq,
                               write)

        out.append(ev(Kind.JOB_START, t, idx=0 if rnd.random() < 0.3 else index))
        step = rnd.randrange(0, 3)
        for _ in range(rnd.randint(0, 12)):
            t += rnd.choice((0.25, 0.5, 1.0))
            out.append(ev(Kind.STEP_START, t, None if rnd.random() < 0.05 else step))
            for start, end in rnd.sample(_BLOCKS, rnd.randint(0, 2)):
                a = t + rnd.choice((0.0, 0.25, 0.5))
                # up to a whole step or more: stalls carved up to the next step's start
                out += [ev(start, a), ev(end, a + rnd.choice((0.0, 0.125, 0.25, 0.75, 1.0, 2.0)))]
            if rnd.random() < 0.2:
                out.append(ev(Kind.STEP_END, t + 0.5, step))
            if rnd.random() < 0.1:
                out.append(ev(Kind.METRIC, t, step, extra={"loss": 1.0}))
            if rnd.random() < 0.05:
                out.append(ev(Kind.STEP_START, math.nan, step))  # no time: its write time
            step += 1
        if rnd.random() < 0.4:
            out.append(ev(Kind.DISRUPTION, t + rnd.choice((0.25, 1.0, 3.0))))
        if rnd.random() < 0.8:
            out.append(ev(Kind.JOB_END, t + rnd.choice((0.5, 1.0))))
        t += rnd.choice((0.0, 0.5, 2.0, 10.0))
        if rnd.random() < 0.6:
            pid += 10
    return out


def _random_run(rnd: random.Random) -> list:
    """Several hosts (some sharing index 0: recorders without an index),
    the scheduler's events from a launcher or a host, unknown writers'
    events, metadata; delivered with some events late."""
    events = []
    for h in range(rnd.randint(1, 6)):
        index = h if rnd.random() < 0.8 else 0
        events += _host_events(rnd, index, f"h{h}", rnd.choice((0.0, 0.0, 0.25, 5.0)))
    if rnd.random() < 0.3:
        launcher = rnd.choice(("launcher", "h0"))
        events += [EventRecord("r", int(Kind.JOB_SUBMITTED), -5.0, None, None, 0, launcher, 9),
                   EventRecord("r", int(Kind.RESOURCES_GRANTED), -1.0, None, None, 0, launcher, 9)]
    if rnd.random() < 0.3:  # an unknown writer (the reference's log), an index-only one
        events.append(EventRecord("r", int(Kind.CUSTOM_BADPUT_START), 2.0))
        events.append(EventRecord("r", int(Kind.STEP_START), 3.0, 1, None, 2))
    if rnd.random() < 0.3:
        events.append(EventRecord("r", int(Kind.METADATA), 0.5, None, {"k": 1}, 1, "h1", 1))
    if rnd.random() < 0.15:  # times as ints (quarter seconds): the paths for non-float times
        def whole(t):
            return int(t * 4) if math.isfinite(t) else t

        events = [e._replace(time=whole(e.time), write_time=whole(e.write_time)) for e in events]
    for _ in range(rnd.randint(0, len(events) // 4)):  # late deliveries
        i, j = rnd.randrange(len(events)), rnd.randrange(len(events))
        events[i], events[j] = events[j], events[i]
    return events


def _same(a: list, b: list) -> bool:
    # NaN times: the same object on both sides, or a stall built by each side
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b))


@settings(max_examples=400, deadline=None)
@given(st.randoms(use_true_random=False))
def test_lead_events_equal_the_per_event_pass_on_random_runs(rnd):
    events = _random_run(rnd)
    assert _same(lead_events(events), before.lead_events(events))
    assert stream_indices(events) == before.stream_indices(events)


def test_the_random_runs_reach_the_cases_that_matter():
    """The generator is worth its name: across seeds it makes multi-writer
    runs with restarts, borrowed disruptions, carved straggler stalls (some
    at the instant of a lead event) and scheduler events."""
    seen = set()
    for seed in range(300):
        events = _random_run(random.Random(seed))
        out = before.lead_events(events)
        if out is not events and len(out) != len(events):
            seen.add("lead chosen")
        if any(e[8] == "straggler" for e in out):
            seen.add("stalls")
            lead_times = {e[2] for e in out if e[8] != "straggler"}
            if any(e[8] == "straggler" and e[2] in lead_times for e in out):
                seen.add("stall ties")
        if any(e[1] == Kind.DISRUPTION and e[6] != out[0][6] for e in out if len(e) > 6):
            seen.add("borrowed disruption")
        if sum(e[1] == Kind.JOB_START for e in out) > 1:
            seen.add("restarts")
        if any(e[1] == Kind.JOB_SUBMITTED for e in out):
            seen.add("scheduler")
    assert seen == {"lead chosen", "stalls", "stall ties", "borrowed disruption", "restarts",
                    "scheduler"}


def test_stalls_at_the_same_instant_as_lead_events_are_slotted_like_one_sort():
    """Ties in time: a stall's end before the lead's events at that instant,
    its start after them (what one sort by (time, side, position) gives)."""
    def host(i, load):
        def ev(kind, t, step=None, seq=0):
            return EventRecord("r", int(kind), t, step, None, i, f"h{i}", 1, "a", seq, t)

        evs = [ev(Kind.JOB_START, 0.0, seq=1)]
        evs += [ev(Kind.STEP_START, 1.0 + k, k, seq=2 + k) for k in range(3)]
        evs += [ev(Kind.BLOCKING_LOAD_START, 2.0, seq=9),
                ev(Kind.BLOCKING_LOAD_END, 2.0 + load, seq=10), ev(Kind.JOB_END, 4.0, seq=11)]
        return evs

    # host 1 blocks the whole of step 1 ([2, 3)): the lead gets a stall [2, 3),
    # starting at its step 1 start (tie) and ending at its step 2 start (tie)
    out = lead_events(host(0, 0.0) + host(1, 1.0))
    kinds = [(Kind(e[1]).name, e[2]) for e in out if e[6] == "h0"]
    assert kinds == [("JOB_START", 0.0), ("STEP_START", 1.0), ("STEP_START", 2.0),
                     ("BLOCKING_LOAD_START", 2.0), ("BLOCKING_LOAD_END", 2.0),
                     ("INPUT_STALL_START", 2.0), ("INPUT_STALL_END", 3.0), ("STEP_START", 3.0),
                     ("JOB_END", 4.0)]
