"""The engine's column-wise ingestion gives exactly what its per-event path gives.

``EventTables.add`` reads batches of at least 256 records column-wise
(``timeline.batch_columns.columns_of_records``) and routes custom badput and
elastic wait rows without the per-event path (``keyed_rows``); ``add_page``
does the same for store pages. The truth here is the per-event path itself:
the same batch ingested with the column-wise helpers switched off must give
the same tables, the same interned names and the same skipped counts.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from goodput_core.events import EventRecord, Kind
from goodput_core.stores.columns import EventPage
from goodput_core.timeline import ingest
from goodput_core.timeline.ingest import EventTables

RUN = "r"
_KINDS = [int(k) for k in Kind]
_KEYED = [int(Kind.CUSTOM_BADPUT_START), int(Kind.CUSTOM_BADPUT_END),
          int(Kind.ELASTIC_WAIT_START), int(Kind.ELASTIC_WAIT_END)]
_TYPES = ["eval", "Eval", "EVAL", "ckpt", "scale_up_1", "slice_down", None, 3, "", "ünï"]
_FIELDS = ["custom_badput_event_type", "elastic_wait_event_type", "other"]


def _event(r: random.Random, i: int, hostile: bool):
    kind = r.choice(_KINDS + _KEYED * 6 + [int(Kind.STEP_START)] * 8)
    if hostile:
        t = r.choice([1000.0 + r.random() * 100, 1000 + r.randrange(100), math.nan, math.inf,
                      2e12, -3.0])
        step = r.choice([r.randrange(40), None, -1, 2.0, True])
    else:  # what the column path takes: one run, int kinds, float times, int steps
        t, step = 1000.0 + i * 0.01, (i if kind == Kind.STEP_START else None)
    x = r.random()
    extra = ({r.choice(_FIELDS): r.choice(_TYPES)} if x < 0.6 else
             "not a dict" if x < 0.65 else None)
    run = RUN if not hostile or r.random() < 0.99 else "other"
    return EventRecord(run, kind, t, step, extra)


def _batch(seed: int):
    r = random.Random(seed)
    hostile = seed % 2 == 1
    events = [_event(r, i, hostile) for i in range(r.choice([300, 1200]))]
    if seed % 4 == 3:
        events[5] = (RUN, int(Kind.STEP_START))  # junk among records
    return events


def _state(tables: EventTables):
    # bytes: NaN values (heartbeat intervals not said) compare equal too
    cols = {(name, c): (tables[name][c].dtype.str, tables[name][c].tobytes())
            for name in sorted(tables.tables) for c in tables[name].names}
    # skipped counts without the zero ones (``Timeline.skipped`` drops those too)
    return cols, +tables.skipped, {k: list(v) for k, v in tables.names.items()}, \
        tables.elastic_seen


def _per_event(monkeypatch, fn):
    """``fn()`` with both column-wise helpers off (every row judged one by one)."""
    with monkeypatch.context() as m:
        m.setattr(ingest, "columns_of_records", lambda events, run: None)
        m.setattr(ingest, "keyed_rows", lambda k, t, rest, *a: (rest, {}))
        return fn()


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("run", [RUN, None])
def test_record_batches_column_wise_equal_the_per_event_path(monkeypatch, seed, run):
    events = _batch(seed)

    def ingest_all():
        tables = EventTables()
        tables.add(events, run)
        return _state(tables)

    fast = ingest_all()
    assert fast == _per_event(monkeypatch, ingest_all)
    # the keyed rows are really there (the test would pass vacuously otherwise)
    assert len(fast[0][("custom", "t")][1]) > 0


def _page(events) -> EventPage:
    records = [e for e in events if isinstance(e, EventRecord) and e.run == RUN]
    step_ok = [type(e.step) is int for e in records]
    return EventPage(RUN, np.array([e.kind for e in records], np.int64),
                     np.array([float(e.time) for e in records]),
                     np.array([e.step if ok else 0 for e, ok in zip(records, step_ok)], np.int64),
                     np.array(step_ok), np.full(len(records), np.nan),
                     {i: e.extra for i, e in enumerate(records) if isinstance(e.extra, dict)})


@pytest.mark.parametrize("seed", range(8))
def test_store_pages_keyed_rows_equal_the_per_event_path(monkeypatch, seed):
    page = _page(_batch(seed))

    def ingest_page():
        tables = EventTables()
        tables.add_page(page)
        return _state(tables)

    fast = ingest_page()
    assert fast == _per_event(monkeypatch, ingest_page)
    assert len(fast[0][("custom", "t")][1]) > 0


def test_custom_types_are_interned_in_arrival_order_upper_cased():
    events = [EventRecord(RUN, int(Kind.STEP_START), 1.0 + i, i) for i in range(300)]
    kinds = (Kind.CUSTOM_BADPUT_START, Kind.CUSTOM_BADPUT_END)
    for i, name in enumerate(["b", "a", "B", "c"]):
        events.append(EventRecord(RUN, int(kinds[i % 2]), 400.0 + i, None,
                                  {"custom_badput_event_type": name}))
    events.append(EventRecord(RUN, int(Kind.CUSTOM_BADPUT_START), 500.0, None, {"x": 1}))
    tables = EventTables()
    tables.add(events, RUN)
    assert tables.names["custom"] == ["B", "A", "C"]
    assert tables["custom"]["key"].tolist() == [0, 1, 0, 2]
    assert tables["custom"]["t"].tolist() == [400.0, 401.0, 402.0, 403.0]
    assert +tables.skipped == {"missing_field": 1}  # (+: without the zero counts)


def test_a_short_step_tuple_in_a_large_batch_is_counted_not_raised():
    """A step start without its step field (a 3-tuple) in a batch read
    column-wise is judged by the per-event path (bad_step), as in a small batch;
    it used to raise IndexError out of ``add``."""
    events = [EventRecord(RUN, int(Kind.STEP_START), 1.0 + i, i) for i in range(300)]
    events.append((RUN, int(Kind.STEP_START), 500.0))
    tables = EventTables()
    assert tables.add(events, RUN) == (1.0, 300)
    assert +tables.skipped == {"bad_step": 1}


class _Int(int):
    """An int subclass (the per-event path takes it as a kind or a step)."""


def _clean_batch():
    """A batch the column path reads whole: job, steps (0 and 1 among them:
    the values a bool reads as), data loads, one run."""
    events = [EventRecord(RUN, int(Kind.JOB_START), 1.0)]
    for i in range(300):
        t = 2.0 + i
        events += [EventRecord(RUN, int(Kind.STEP_START), t, i),
                   EventRecord(RUN, int(Kind.DATA_LOADING_START), t + 0.1),
                   EventRecord(RUN, int(Kind.DATA_LOADING_END), t + 0.2)]
    return events


# One odd value in an otherwise clean batch: (row, field, value). Row 0 is the
# job start (kind 1: what True reads as), rows 1 and 4 the steps 0 and 1.
_ODD_VALUES = [
    (0, "kind", True), (2, "kind", False), (0, "kind", _Int(1)), (2, "kind", np.int64(9)),
    (2, "kind", Kind.DATA_LOADING_START), (2, "kind", 300), (2, "kind", -1),
    (2, "kind", 2 ** 70), (2, "kind", 9.0),
    (2, "time", 5), (2, "time", np.float64(5.0)), (2, "time", True), (2, "time", "5.0"),
    (2, "time", 2 ** 2000), (2, "time", math.nan), (2, "time", -math.inf), (2, "time", 3e12),
    (1, "step", True), (4, "step", False), (1, "step", False), (4, "step", True),
    (1, "step", _Int(0)), (4, "step", np.int64(1)), (4, "step", 1.0), (4, "step", 2 ** 63),
    (4, "step", 2 ** 62), (4, "step", -1), (4, "step", None), (4, "step", "1"),
    (2, "run", "other"),
]


@pytest.mark.parametrize("row,field,value", _ODD_VALUES)
@pytest.mark.parametrize("run", [RUN, None])
def test_one_odd_value_is_judged_as_the_per_event_path_judges_it(monkeypatch, row, field,
                                                                 value, run):
    events = _clean_batch()
    events[row] = events[row]._replace(**{field: value})

    def ingest_all():
        tables = EventTables()
        tables.add(events, run)
        return _state(tables)

    assert ingest_all() == _per_event(monkeypatch, ingest_all)


def test_bools_among_kinds_and_steps_leave_the_rest_column_wise(monkeypatch):
    """A bool kind or step is judged alone (counted as the per-event path
    counts it); the batch's other rows are still read column-wise."""
    events = _clean_batch()
    events[0] = events[0]._replace(kind=True)   # a job start's code
    events[1] = events[1]._replace(step=False)  # step 0's value
    events[4] = events[4]._replace(step=True)   # step 1's value
    judged = []
    add_one = EventTables._add_one
    monkeypatch.setattr(EventTables, "_add_one",
                        lambda self, ev, *a: judged.append(ev) or add_one(self, ev, *a))
    tables = EventTables()
    tables.add(events, RUN)
    assert judged == [events[0], events[1], events[4]]
    assert +tables.skipped == {"unknown_kind": 1, "bad_step": 2}
    assert tables["step_start"]["step"].tolist() == list(range(2, 300))
    assert len(tables["dl"]) == 600
