"""R3: hostile event streams never break queries (docs/quality.md).

Streams are generated two ways, as reference-format payload dicts parsed by
``events.from_payload`` (and fed with ``Calculator.add_payloads``) and as
raw ``EventRecord``s: any order, duplicates, unmatched starts and ends,
NaN/inf, negative or huge numbers, missing fields, unknown kinds, wrong
types. Queries must not raise, the partition must hold, and unusable inputs
must be counted. Feeding a stream in chunks (the incremental path) must give
the same answer as feeding it at once.
"""

from __future__ import annotations

import math
import os
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from goodput_core.timeline.buckets import BadputType as B
from goodput_core.queries.calculator import Calculator
from goodput_core.events import KINDS, EventRecord, Kind

# GOODPUT_HYPOTHESIS_EXAMPLES raises the example count for stress runs
SETTINGS = settings(max_examples=int(os.environ.get("GOODPUT_HYPOTHESIS_EXAMPLES", 150)),
                    deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# times mostly in a small range so that intervals interact
nice_time = st.integers(0, 400).map(lambda i: 1000.0 + i / 4)
weird_number = st.sampled_from([math.nan, math.inf, -math.inf, -1e300, 1e300, -5.0, 0.0,
                                2 ** 70, -(2 ** 70), 1e12 + 1, True])
any_time = st.one_of(nice_time, nice_time, nice_time, weird_number,
                     st.sampled_from(["1000", None, [1], {"t": 1}]))
any_step = st.one_of(st.integers(0, 30), st.integers(0, 30), st.integers(-5, 2 ** 70),
                     st.sampled_from([None, 1.0, 2.5, "3", math.nan, True, -1]))
type_name = st.sampled_from(["eval", "EVAL", "sdc", "scale_up", "slice_down", "", "x y"])
extra = st.one_of(st.none(), st.dictionaries(
    st.sampled_from(["custom_badput_event_type", "elastic_wait_event_type", "disruption_cause",
                     "event_type", "checkpoint_manager_blocking_duration_secs",
                     "checkpoint_manager_duration_secs", "fun_name", "junk"]),
    st.one_of(type_name, any_time, st.sampled_from(["save", "restore", "emergency_restore"])),
    max_size=4))
known_kind = st.sampled_from([int(k) for k in Kind])
any_kind = st.one_of(known_kind, known_kind, known_kind,
                     st.sampled_from([0, 99, -1, True, "3", None, 3.0]))


@st.composite
def raw_records(draw):
    kind = draw(any_kind)
    run = draw(st.sampled_from(["r", "r", "r", "other"]))
    return EventRecord(run, kind, draw(any_time), draw(any_step), draw(extra),
                       write_time=draw(st.one_of(nice_time, weird_number)))


@st.composite
def good_records(draw):
    """Well-formed events of the partition kinds, at nice times."""
    kind = draw(st.sampled_from([k for k in Kind if k not in (Kind.METADATA, Kind.METRIC,
                                                              Kind.ELASTIC_SLICE_COUNTS)]))
    t = draw(nice_time)
    step = draw(st.integers(0, 12)) if kind in (Kind.STEP_START, Kind.STEP_END) else None
    ex = None
    if kind in (Kind.CUSTOM_BADPUT_START, Kind.CUSTOM_BADPUT_END):
        ex = {"custom_badput_event_type": draw(st.sampled_from(["eval", "sdc"]))}
    elif kind in (Kind.ELASTIC_WAIT_START, Kind.ELASTIC_WAIT_END):
        ex = {"elastic_wait_event_type": draw(st.sampled_from(["scale_up", "slice_down"]))}
    elif kind == Kind.DISRUPTION:
        ex = {"disruption_cause": "preemption"}
    elif kind == Kind.CHECKPOINT_STATS:
        et = draw(st.sampled_from(["save", "restore"]))
        ex = {"event_type": et, ("checkpoint_manager_blocking_duration_secs" if et == "save"
                                 else "checkpoint_manager_duration_secs"):
              draw(st.integers(0, 40)) / 4}
    return EventRecord("r", int(kind), t, step, ex, write_time=t + 1)


@st.composite
def payloads(draw):
    """Reference-format dicts, mostly plausible, often broken."""
    spec = KINDS[Kind(draw(known_kind))]
    p = {}
    if draw(st.integers(0, 9)):
        p["job_name"] = draw(st.sampled_from(["r", "r", "r", "other", 5]))
    if spec.kind == Kind.CHECKPOINT_STATS:
        p["event_type"] = draw(st.sampled_from(["save", "restore", "emergency_restore", "x"]))
    if draw(st.integers(0, 9)):
        p[spec.time_key] = draw(any_time)
    if spec.step_key and draw(st.integers(0, 5)):
        p[spec.step_key] = draw(any_step)
    for key in spec.required:
        if draw(st.integers(0, 5)):
            p[key] = draw(st.one_of(type_name, any_time))
    if draw(st.booleans()):
        p.update(draw(extra) or {})
    return p if draw(st.integers(0, 30)) else draw(st.sampled_from([None, [], "x", 5]))


def query_all(calc: Calculator, now: float, rnd: random.Random):
    """Runs every kind of query; checks invariants; returns the cumulative result."""
    results = [calc.cumulative(now=now)]
    a, b = sorted(rnd.uniform(900, 1200) for _ in range(2))
    results.append(calc.window(a, b, now=now))
    results.append(calc.window(-math.inf, math.inf, now=now,
                               exclude=[(a, b), (b - 5, b + 20), (0, 950)]))
    results.extend(calc.rolling([0, 10, 1e9], now=now))
    for r in results:
        check_invariants(r)
    check_spans(calc, results[0])
    calc.step_stats()
    calc.step_stats(ideal_step_time=1.0)
    return results[0]


def check_invariants(r) -> None:
    scale = max(1.0, abs(r.lifetime[0]) if math.isfinite(r.lifetime[0]) else 1.0)
    tol = 1e-9 * scale
    parts = r.productive_seconds + sum(v for k, v in r.badput_seconds.items()
                                       if k is not B.DATA_LOADING_ASYNC)
    assert parts == pytest.approx(r.total_seconds, abs=tol)
    for v in list(r.badput_seconds.values()) + [r.productive_seconds]:
        assert -tol <= v <= r.total_seconds + tol
    for v in list(r.badput_percent.values()) + [r.goodput]:
        assert 0.0 <= v <= 100.0 + 1e-9
    if math.isfinite(r.window[0]):
        span = r.window[1] - r.window[0]
        # scheduling waits leave the partition like idle time (lifecycle)
        assert r.total_seconds + r.idle_seconds + r.excluded_seconds + r.scheduling_seconds == \
            pytest.approx(span, abs=tol)
        assert r.scheduling_seconds >= 0
    assert all(isinstance(n, int) and n > 0 for n in r.skipped.values())


def check_spans(calc: Calculator, r) -> None:
    """The labelled spans tile the lifetime and sum to the result's buckets."""
    spans = calc.spans(now=r.query_time)
    tol = 1e-9 * max(1.0, abs(r.lifetime[0]) if math.isfinite(r.lifetime[0]) else 1.0)
    sums: dict = {}
    for (a, b, label), nxt in zip(spans, spans[1:] + [None]):
        assert b > a
        if nxt is not None:
            assert nxt[0] == pytest.approx(b, abs=tol)
        label = "CUSTOM_BADPUT_EVENTS" if label.startswith("CUSTOM") else label
        sums[label] = sums.get(label, 0.0) + (b - a)
    assert sums.get("PRODUCTIVE", 0.0) == pytest.approx(r.productive_seconds, abs=tol * 10)
    assert sums.get("IDLE", 0.0) == pytest.approx(r.idle_seconds, abs=tol * 10)
    assert sums.get("SCHEDULING", 0.0) == pytest.approx(r.scheduling_seconds, abs=tol * 10)
    for k, v in r.badput_seconds.items():
        if k is not B.DATA_LOADING_ASYNC:
            assert sums.get(k.name, 0.0) == pytest.approx(v, abs=tol * 10), k


def same(r1, r2) -> None:
    tol = 1e-9 * max(1.0, abs(r1.lifetime[0]) if math.isfinite(r1.lifetime[0]) else 1.0)
    assert r1.total_seconds == pytest.approx(r2.total_seconds, abs=tol)
    assert r1.productive_seconds == pytest.approx(r2.productive_seconds, abs=tol)
    for k in r1.badput_seconds:
        assert r1.badput_seconds[k] == pytest.approx(r2.badput_seconds[k], abs=tol), k
    assert r1.idle_seconds == pytest.approx(r2.idle_seconds, abs=tol)
    assert r1.disruptions == r2.disruptions
    assert r1.max_productive_step == r2.max_productive_step
    assert r1.last_step == r2.last_step
    assert r1.skipped == r2.skipped


def chunked(events, rnd):
    i = 0
    while i < len(events):
        k = rnd.randint(1, max(1, len(events) // 3))
        yield events[i:i + k]
        i += k


@SETTINGS
@given(st.lists(raw_records(), max_size=120), st.integers(0, 2 ** 32))
def test_raw_records_never_break_queries(events, seed):
    rnd = random.Random(seed)
    cold = Calculator("r", clock=lambda: 1200.0)
    cold.add(events)
    r_cold = query_all(cold, 1200.0, rnd)
    inc = Calculator("r", clock=lambda: 1200.0)
    for chunk in chunked(events, rnd):
        inc.add(chunk)
        query_all(inc, 1200.0, rnd)
    same(inc.cumulative(), r_cold)


@SETTINGS
@given(st.lists(payloads(), max_size=120), st.integers(0, 2 ** 32))
def test_payload_dicts_never_break_queries(items, seed):
    rnd = random.Random(seed)
    calc = Calculator("r", clock=lambda: 1200.0)
    for chunk in chunked(items, rnd):
        calc.add_payloads(chunk)
        query_all(calc, 1200.0, rnd)


@SETTINGS
@given(st.lists(good_records(), max_size=150), st.integers(0, 2 ** 32))
def test_incremental_equals_cold_and_duplicates_do_not_matter(events, seed):
    rnd = random.Random(seed)
    events = sorted(events, key=lambda e: e.time)  # mostly in order, as a store delivers
    cold = Calculator(clock=lambda: 1200.0)
    cold.add(events)
    r_cold = query_all(cold, 1200.0, rnd)
    inc = Calculator(clock=lambda: 1200.0)
    for chunk in chunked(events, rnd):
        inc.add(chunk)
        inc.cumulative()
    same(inc.cumulative(), r_cold)
    # a second delivery of the step and job events changes nothing but the count
    again = [e for e in events if e.kind in (Kind.STEP_START, Kind.JOB_START, Kind.JOB_END)]
    inc.add(again)
    r_again = inc.cumulative()
    assert r_again.skipped.get("duplicate", 0) - r_cold.skipped.get("duplicate", 0) == len(again)
    assert r_again.total_seconds == pytest.approx(r_cold.total_seconds, abs=1e-9)
    assert r_again.productive_seconds == pytest.approx(r_cold.productive_seconds, abs=1e-9)


@SETTINGS
@given(st.lists(good_records(), max_size=80), st.randoms(use_true_random=False))
def test_arrival_order_does_not_matter_for_distinct_times(events, rnd):
    seen, distinct = set(), []
    for e in events:
        if e.time not in seen:
            seen.add(e.time)
            distinct.append(e)
    shuffled = list(distinct)
    rnd.shuffle(shuffled)
    a, b = Calculator(clock=lambda: 1200.0), Calculator(clock=lambda: 1200.0)
    a.add(distinct)
    for chunk in chunked(shuffled, rnd):
        b.add(chunk)
        b.cumulative()
    same(a.cumulative(), b.cumulative())


typed_kind = st.one_of(known_kind, known_kind, st.sampled_from([0, 99, -3, 2 ** 40]))
typed_time = st.one_of(nice_time, nice_time, nice_time,
                       st.sampled_from([math.nan, math.inf, -1e300, 2 ** 70, 7, -5.0]))
typed_step = st.one_of(st.integers(0, 30), st.integers(0, 30), st.none(),
                       st.sampled_from([-1, 2 ** 62, 2 ** 70]))


@SETTINGS
@given(st.lists(st.builds(lambda k, t, s, x: EventRecord("r", k, t, s, x), typed_kind,
                          typed_time, typed_step, extra), min_size=1, max_size=60),
       st.integers(256, 700))
def test_column_wise_ingestion_equals_the_per_event_path(events, n):
    events = (events * (n // len(events) + 1))[:n]  # >= 256: the column-wise path
    big = Calculator("r", clock=lambda: 1200.0)
    big.add(events)
    small = Calculator("r", clock=lambda: 1200.0)
    for e in events:  # one at a time: the per-event path (and the incremental one)
        small.add([e])
    same(big.cumulative(), small.cumulative())


@SETTINGS
@given(st.lists(st.one_of(
    st.builds(lambda t: EventRecord("r", int(Kind.STEP_START), t, 1), weird_number),
    st.builds(lambda k: EventRecord("r", k, 1000.0), st.sampled_from([0, 99, -3])),
    st.builds(lambda s: EventRecord("r", int(Kind.STEP_START), 1000.0, s),
              st.sampled_from([None, -1, 2 ** 70, "x", 1.5])),
    st.just(EventRecord("r", int(Kind.CUSTOM_BADPUT_START), 1000.0, None, None)),
    st.just(EventRecord("r", int(Kind.CHECKPOINT_STATS), 1000.0, None, {"event_type": "save"})),
    st.just("not an event"), st.just(None)), max_size=40))
def test_every_unusable_input_is_counted(events):
    assume(events)
    calc = Calculator("r", clock=lambda: 1200.0)
    calc.add(events)
    r = calc.cumulative()
    # True is an int; as a time it is rejected as a wrong type too
    assert sum(r.skipped.values()) == len(events)
    assert r.total_seconds == 0.0


def test_impossible_query_arguments_raise_value_error():
    calc = Calculator(clock=lambda: 10.0)
    for bad in ((2.0, 1.0), (math.nan, 1.0), (0.0, math.nan), ("a", 1.0)):
        with pytest.raises(ValueError):
            calc.window(*bad)
    with pytest.raises(ValueError):
        calc.cumulative(exclude=[(5.0, 1.0)])
    with pytest.raises(ValueError):
        calc.cumulative(exclude=[(math.nan, 1.0)])
    with pytest.raises(ValueError):
        calc.rolling([-1.0])
