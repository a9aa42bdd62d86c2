"""quality.md P9: the recorder opens its store on the writer thread, never the caller's."""

from __future__ import annotations

import logging
import threading

import pytest

from goodput_core import Recorder, StoreError
from goodput_core.events import to_payload
from goodput_core.stores import check_store_url, open_store
from goodput_core.stores import sqlite as sqlite_module


@pytest.fixture
def blocked_sqlite(monkeypatch):
    """SqliteStore opens block until ``release`` is set; ``opening`` is set
    when an open has started, ``threads`` lists the threads that opened."""

    class Gate:
        opening = threading.Event()
        release = threading.Event()
        threads: list = []

    real = sqlite_module.SqliteStore

    class BlockingSqliteStore(real):
        def __init__(self, *args, **kwargs):
            Gate.threads.append(threading.get_ident())
            Gate.opening.set()
            assert Gate.release.wait(30), "the test never released the open"
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(sqlite_module, "SqliteStore", BlockingSqliteStore)
    yield Gate
    Gate.release.set()


def test_first_record_returns_while_the_store_open_is_blocked(blocked_sqlite, tmp_path):
    url = f"sqlite:///{tmp_path}/g.sqlite"
    rec = Recorder("run", url, clock=lambda: 1000.0)
    rec.record_job_start_time()        # must not wait for the open
    rec.record_step_start_time(0)
    assert blocked_sqlite.opening.wait(10)  # the open started...
    assert not blocked_sqlite.release.is_set()  # ...and is still blocked: we got here anyway
    assert blocked_sqlite.threads == [rec._writer.ident]
    assert blocked_sqlite.threads[0] != threading.get_ident()
    assert rec.stats()["queued"] == 2 and rec.stats()["store_error"] is None

    blocked_sqlite.release.set()
    assert rec.flush(10)
    events, _ = open_store(url).read("run")
    assert [sorted(k for k in to_payload(e) if k.endswith("time")) for e in events] == [
        ["job_start_time"], ["step_start_time"]]
    rec.close()


def test_a_store_that_cannot_be_opened_is_reported_not_raised(tmp_path, caplog):
    # a directory is not a sqlite file: the open fails on the writer thread
    with caplog.at_level(logging.ERROR, logger="goodput"):
        rec = Recorder("run", str(tmp_path))
        rec.record_job_start_time()
        assert rec.flush(10) is False
        assert rec.flush(10) is False
    error = rec.stats()["store_error"]
    assert error is not None and str(tmp_path) in error and "directory" in error
    assert rec.stats()["queued"] >= 1  # kept for a later successful open, not lost silently
    opened = [r for r in caplog.records if "cannot open the store" in r.getMessage()]
    assert len(opened) == 1 and opened[0].threadName.startswith("goodput-writer-")


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
