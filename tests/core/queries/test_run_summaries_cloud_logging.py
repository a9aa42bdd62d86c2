"""Run summaries over Cloud Logging (the loopback fake server): each run's version
is where its newest entry stands (the cursor a read of it ends at); after a first
look at the whole log, a later look reads only the entries after the newest seen;
summaries are cached locally by those versions and never served stale."""

from __future__ import annotations

import datetime as dt

import pytest

from goodput_core.events import Kind
from goodput_core.queries.summaries import run_summaries
from goodput_core.stores.base import StoreError
from goodput_core.stores.summary_cache import SummaryCache
from tests.core.stores.cloud_logging.test_store import SimClock, T0, event
from tests.core.stores.cloud_logging.test_store import fake, make_store  # noqa: F401  (fixtures)
from tests.core.queries.test_run_summaries import counted  # noqa: F401  (a fixture)


def _ended(run: str, start: int):
    """Job start, three 1 s steps from 1 s, the last closed by its step end at 4 s,
    job end at 4 s: 3 s productive of 4 s (as test_run_summaries' runs)."""
    return ([event(run, Kind.JOB_START, start)]
            + [event(run, Kind.STEP_START, start + 1 + k, step=k) for k in range(3)]
            + [event(run, Kind.STEP_END, start + 4, step=2),
               event(run, Kind.JOB_END, start + 4)._replace(seq=start + 6)])  # after the step end


def _position(store, run: str) -> str:
    """The cursor a fresh read of ``run`` ends at, as a version."""
    seconds, nanos, insert_id = store.read(run)[1]
    return f"{seconds}.{nanos:09d}/{insert_id}"


def test_versions_are_each_runs_read_cursor_and_later_looks_read_only_new_entries(
        fake, make_store):
    store = make_store(page_size=2)
    store.append(_ended("a", 0) + _ended("b", 10))  # 12 entries
    assert store.flush(10)
    lists = fake.calls["list"]
    first = store.run_versions()
    assert fake.calls["list"] - lists == 6  # the whole log once: 12 entries, 2 a page
    assert list(first) == ["a", "b"]  # oldest first
    assert first == {"a": _position(store, "a"), "b": _position(store, "b")}
    store.append([event("b", Kind.METRIC, 20, extra={"metric_name": "loss",
                                                     "metric_value": 1.0})])
    assert store.flush(10)
    lists = fake.calls["list"]
    second = store.run_versions()
    assert fake.calls["list"] - lists == 1  # one new entry: one page
    assert second["a"] == first["a"] and second["b"] != first["b"]
    assert second["b"] == _position(store, "b")
    lists = fake.calls["list"]
    assert store.run_versions() == second and fake.calls["list"] - lists == 1  # nothing new
    assert store.runs() == ["a", "b"]


def test_a_failed_look_keeps_the_index_and_the_next_one_completes(fake, make_store):
    store = make_store(page_size=2, read_attempts=1)
    store.append(_ended("a", 0))
    assert store.flush(10)
    before = store.run_versions()
    store.append(_ended("b", 10))
    assert store.flush(10)
    fake.fail()
    with pytest.raises(StoreError):
        store.run_versions()
    fake.heal()
    after = store.run_versions()
    assert after["a"] == before["a"] and after["b"] == _position(store, "b")


def test_a_run_whose_entries_left_the_window_is_no_longer_listed(make_store):
    clock = SimClock(T0 + 100)
    store = make_store(clock=clock, lookback=dt.timedelta(seconds=200))
    store.append(_ended("old", 0) + _ended("new", 50))
    assert store.flush(10)
    assert list(store.run_versions()) == ["old", "new"]
    clock.now = T0 + 252  # old's newest entry (T0 + 4.5) left the window; new's did not
    assert list(store.run_versions()) == ["new"]
    assert [r[0] for r in store.log_index()["runs"]] == ["new"]  # dropped, not kept


def test_summaries_are_cached_by_the_logs_positions_and_never_stale(
        make_store, tmp_path, counted):  # noqa: F811
    store = make_store()
    store.append(_ended("a", 0) + _ended("b", 10))
    assert store.flush(10)
    cache = SummaryCache(str(tmp_path / "s.sqlite"))
    now = T0 + 100
    first = {s.run: s for s in run_summaries(store, now=now, cache=cache)}
    assert sorted(counted) == ["a", "b"]
    # by hand: 3 s productive of a 4 s lifetime
    assert first["a"].state == "ended" and first["a"].goodput == pytest.approx(75.0)
    counted.clear()
    again = {s.run: s for s in run_summaries(store, now=now + 50, cache=cache)}
    assert counted == [] and again == first  # unchanged and ended: from the cache
    store.append([event("b", Kind.JOB_START, 20), event("b", Kind.JOB_END, 22)])
    assert store.flush(10)
    third = {s.run: s for s in run_summaries(store, now=now + 60, cache=cache)}
    assert counted == ["b"]  # only the run that changed is read again
    assert third["b"].total_seconds == pytest.approx(first["b"].total_seconds + 2)
    assert third["a"] == first["a"]


def test_a_later_listing_in_another_process_reads_only_the_new_entries(
        fake, make_store, tmp_path, counted):  # noqa: F811
    """The log's index travels in the summary cache: a second store object (as in
    the next ``goodput runs --summary``) starts from it instead of the whole log."""
    cache_path = str(tmp_path / "s.sqlite")
    writer = make_store()
    writer.append(_ended("a", 0) + _ended("b", 10))  # 14 entries
    assert writer.flush(10)
    now = T0 + 100
    first = {s.run: s for s in run_summaries(make_store(page_size=2), now=now,
                                             cache=SummaryCache(cache_path))}
    writer.append([event("b", Kind.JOB_START, 20), event("b", Kind.JOB_END, 22)])
    assert writer.flush(10)
    counted.clear()
    asked = len(fake.filters)
    later = {s.run: s for s in run_summaries(make_store(page_size=2), now=now,
                                             cache=SummaryCache(cache_path))}
    assert counted == ["b"] and later["a"] == first["a"]  # only the changed run is read
    assert later["b"].total_seconds == pytest.approx(first["b"].total_seconds + 2)
    queries = fake.filters[asked:]
    whole_log = [q for q in queries if "jsonPayload.job_name" not in q]
    # the versions: one page after the kept cursor (the 2 new entries), not the 7 pages
    # of the whole log
    assert len(whole_log) == 1 and "insertId>" in whole_log[0]
    assert all('jsonPayload.job_name="b"' in q for q in queries if q not in whole_log)


def test_an_index_of_another_log_or_a_broken_one_is_not_used(make_store):
    store = make_store()
    store.append(_ended("a", 0))
    assert store.flush(10)
    other = make_store(log_name="another-log")
    assert not other.restore_log_index(None)
    assert not other.restore_log_index({"log": "projects/x/logs/y", "cursor": [1, 2, "i"],
                                        "runs": []})
    assert list(store.run_versions()) == ["a"]
    kept = store.log_index()
    assert not other.restore_log_index(kept)  # another log's index
    fresh = make_store()
    assert fresh.restore_log_index(kept) and fresh.run_versions() == store.run_versions()
    assert not fresh.restore_log_index(kept)  # it has an index of its own already
