"""A query in the process that recorded sees what was just recorded (real SQLite).

The recorders here never drain on their own during the test (a flush
interval of an hour and a queue far from half full), as when a query comes
right after ``record_job_end_time()``: only the calculators' flush before
reading can bring the events into the store.
"""

from __future__ import annotations

import threading

import pytest

from goodput_core import Calculator, Recorder
from goodput_core.compat import goodput as compat
import goodput_core.record.hooks as hooks_module
from goodput_core.record.hooks import flush_before_read
from goodput_core.stores import open_store
from goodput_core.stores.memory import MemoryStore
from tests.support.fake_clock import FakeClock

T0 = 1_700_000_000.0
HOUR = 3600.0


def record_job(rec, clock, steps=50):
    """Job start at T0, steps 0..steps-1 of 1 s from T0 + 5, job end after the last."""
    clock.t = T0
    rec.record_job_start_time()
    for s in range(steps):
        clock.t = T0 + 5 + s
        rec.record_step_start_time(s)
    clock.t = T0 + 5 + steps
    rec.record_job_end_time()


@pytest.fixture
def url(tmp_path):
    return "sqlite:///" + str(tmp_path / "ryw.sqlite")


def test_compat_calculator_sees_the_last_steps_and_the_job_end(url):
    clock = FakeClock(T0)
    rec = compat.GoodputRecorder("job", "log", True, store=url, clock=clock,
                                 background_max_latency_s=HOUR)
    rec._writer.interval = HOUR  # pylint: disable=protected-access  (no timed drain)
    record_job(rec, clock)
    assert rec.has_unstored()
    calc = compat.GoodputCalculator("job", "log", store=url, clock=lambda: T0 + 1000)
    goodput, _, step = calc.get_job_goodput()
    # 50 s of steps of 55 s (5 s before the first step is OTHER); the last
    # step is closed by the job end, so it counts and is the last kept step.
    assert (goodput, step) == (pytest.approx(100 * 50 / 55), 49)
    assert calc.get_job_goodput_details()["total_elapsed_time"] == 55.0
    assert not rec.has_unstored()


def test_native_calculator_refresh_sees_what_was_recorded(url):
    clock = FakeClock(T0)
    rec = Recorder("job", url, clock=clock, flush_interval_s=HOUR)
    calc = Calculator("job", url)
    record_job(rec, clock, steps=10)
    calc.refresh()
    r = calc.cumulative(now=T0 + 1000)
    assert (r.total_seconds, r.productive_seconds, r.last_step) == (15.0, 10.0, 9)
    # more events, then another refresh: only the new ones are read
    clock.t = T0 + 20
    rec.record_job_start_time()
    assert calc.refresh() == 1


def test_only_recorders_of_that_run_and_store_are_flushed(url):
    clock = FakeClock(T0)
    mine = Recorder("job", url, clock=clock, flush_interval_s=HOUR)
    other_run = Recorder("other", url, clock=clock, flush_interval_s=HOUR)
    other_store = Recorder("job", MemoryStore("ryw-other"), clock=clock, flush_interval_s=HOUR)
    flushed = []
    for rec in (mine, other_run, other_store):
        real = rec.flush
        rec.flush = (lambda real, name: lambda *a, **k: flushed.append(name) or real(*a, **k))(
            real, rec.run + "@" + rec._store.url)  # pylint: disable=protected-access
        rec.record_job_start_time()
    # the same file opened as another Store object (as `goodput report` would)
    assert flush_before_read("job", open_store(url))
    assert flushed == ["job@" + open_store(url).url]
    assert other_run.has_unstored() and other_store.has_unstored()
    # nothing pending: no flush at all
    flushed.clear()
    assert flush_before_read("job", open_store(url))
    assert flushed == []


class BlockedStore(MemoryStore):
    """A store whose writes wait until released (a store that is down)."""

    def __init__(self):
        super().__init__("ryw-blocked")
        self.release = threading.Event()

    def append(self, batch):
        self.release.wait()
        super().append(batch)


def test_the_wait_is_bounded_and_the_query_still_answers(monkeypatch):
    monkeypatch.setattr(hooks_module, "READ_FLUSH_TIMEOUT_S", 0.0)
    store = BlockedStore()
    clock = FakeClock(T0)
    rec = Recorder("job", store, clock=clock, flush_interval_s=HOUR)
    rec.record_job_start_time()
    calc = Calculator("job", store)
    try:
        assert flush_before_read("job", store, timeout=0.0) is False
        assert calc.refresh() == 0  # nothing stored yet: the query is not held up for ever
    finally:
        store.release.set()
    assert rec.flush(10)
    assert calc.refresh() == 1
