"""docs/quality.md P9: what the recorder and the monitors do off the caller's thread
(the store's open, a monitor's first cycle)."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from goodput_core import Recorder, StoreError
from goodput_core.compat.goodput_utils import GCPOptions
from goodput_core.compat.monitoring import GoodputMonitor
from goodput_core.exporters.base import Exporter
from goodput_core.monitor import Monitor
from goodput_core.stores.memory import MemoryStore
from goodput_core.events import to_payload
from goodput_core.stores import check_store_url, open_store
from goodput_core.stores.sqlite import store as sqlite_module
from tests.support.blocked_init import block_constructor
from tests.support.fake_clock import FakeClock


@pytest.fixture
def blocked_sqlite(monkeypatch, tmp_path):
    """Blocks the open of this test's store only (a recorder another test left
    may open its own store meanwhile: a random test order failed on that)."""
    mine = os.path.realpath(tmp_path / "g.sqlite")
    gate = block_constructor(monkeypatch, sqlite_module, "SqliteStore",
                             only=lambda path, **_: os.path.realpath(path) == mine)
    yield gate
    gate.release.set()


def test_first_record_returns_while_the_store_open_is_blocked(blocked_sqlite, tmp_path):
    url = f"sqlite:///{tmp_path}/g.sqlite"
    rec = Recorder("run", url, clock=lambda: 1000.0)
    try:
        rec.record_job_start_time()        # must not wait for the open
        rec.record_step_start_time(0)
        assert blocked_sqlite.opening.wait(10)  # the open started...
        assert not blocked_sqlite.release.is_set()  # ...and is still blocked: we got here
        assert blocked_sqlite.threads == [rec._writer.thread.ident]
        assert blocked_sqlite.threads[0] != threading.get_ident()
        assert rec.stats()["queued"] == 2 and rec.stats()["store_error"] is None

        blocked_sqlite.release.set()
        assert rec.flush(10)
        events, _ = open_store(url).read("run")
        assert [sorted(k for k in to_payload(e) if k.endswith("time")) for e in events] == [
            ["job_start_time"], ["step_start_time"]]
    finally:
        blocked_sqlite.release.set()
        rec.close()


def test_a_store_that_cannot_be_opened_is_reported_not_raised(tmp_path, caplog):
    # a directory is not a sqlite file: the open fails on the writer thread
    path = tmp_path / "g.sqlite"
    path.mkdir()
    rec = Recorder("run", str(path))
    try:
        with caplog.at_level(logging.ERROR, logger="goodput"):
            rec.record_job_start_time(5.0)
            assert rec.flush(10) is False
            assert rec.flush(10) is False
        error = rec.stats()["store_error"]
        assert error is not None and str(path) in error and "directory" in error
        assert rec.stats()["written"] == 0 and rec.stats()["dropped"] == 0
        # the store's own line, once (the writer may add its "will retry" line
        # when a write reached the store first: that depends on the timing)
        opened = [r for r in caplog.records
                  if r.getMessage().startswith(f"goodput: cannot open the store {rec._store.url}")]
        assert len(opened) == 1 and opened[0].threadName.startswith("goodput-writer-")

        path.rmdir()  # the cause goes away: the kept event is written, once
        assert rec.flush(10) is True
        assert rec.stats()["store_error"] is None
        assert [e.time for e in open_store(str(path)).read("run")[0]] == [5.0]
    finally:
        if path.is_dir():
            path.rmdir()  # else this recorder would fail every later flush_all()
        rec.close(10)


@pytest.mark.parametrize("url, match", [
    ("ftp://somewhere", "unknown store scheme"),
    ("sqlite://", "names no file"),
    ("", "empty"),
    ("cloud-logging://only-project", "PROJECT/LOG_NAME"),
    ("cloud-logging://Bad Project!/log", "project id"),
])
def test_a_malformed_url_still_fails_in_the_constructor(url, match):
    with pytest.raises(StoreError, match=match):
        check_store_url(url)
    with pytest.raises(StoreError, match=match):
        Recorder("run", url)


def test_an_open_store_object_is_used_as_is(tmp_path):
    store = open_store(f"sqlite:///{tmp_path}/s.sqlite")
    rec = Recorder("run", store)
    assert rec._store is store
    rec.record_job_start_time(5.0)
    assert rec.flush(10)
    assert len(store.read("run")[0]) == 1


class BlockingExporter(Exporter):
    """Blocks in export() until released; records the exporting thread."""

    name = "blocking"

    def __init__(self):
        self.exporting = threading.Event()
        self.release = threading.Event()
        self.threads = []

    def export(self, snapshot):
        self.threads.append(threading.get_ident())
        self.exporting.set()
        assert self.release.wait(60)


def _first_cycle_now(clock):
    """A monitor wait that lets the first cycle come at once (the fake clock
    jumps to it), then asks the loop to stop."""
    calls = []

    def wait(seconds):
        calls.append(seconds)
        clock.advance(seconds)
        return len(calls) > 1

    return wait


def test_monitor_start_returns_while_its_first_cycle_is_blocked():
    store = MemoryStore()
    Recorder("run", store).record_job_start_time(1.0)
    exporter = BlockingExporter()
    clock = FakeClock(10.0)
    m = Monitor("run", store, [exporter], clock=clock, wait=_first_cycle_now(clock))
    m.start()
    assert exporter.exporting.wait(10) and not exporter.release.is_set()
    assert exporter.threads[0] != threading.get_ident()
    exporter.release.set()
    assert m.stop(10, skip_final_flush=True)


def test_compat_uploader_start_returns_while_its_first_cycle_is_blocked(tmp_path):
    store = MemoryStore()
    rec = Recorder("run", store)
    rec.record_job_start_time(1.0)
    assert rec.flush(10)
    exporter = BlockingExporter()
    clock = FakeClock(10.0)
    m = GoodputMonitor("run", "log", str(tmp_path), 30, monitoring_enabled=True,
                       gcp_options=GCPOptions(enable_gcp_goodput_metrics=False,
                                              enable_gcp_step_deviation_metrics=False),
                       store=store, clock=clock, wait=_first_cycle_now(clock),
                       exporters=[exporter])
    m.start_goodput_uploader()
    assert exporter.exporting.wait(10) and not exporter.release.is_set()
    exporter.release.set()
    m.stop_goodput_uploader(skip_final_flush=True)
