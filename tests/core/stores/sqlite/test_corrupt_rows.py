"""R11: one corrupt row in a store is skipped and counted by every command;
the rest of the run is read.

A store holds the synthetic job plus rows a damaged or hand-edited file may
have: bad JSON in ``extra``, ``extra='[1,2]'``, ``kind=999``, a text step and
a text time. Each is checked as a plain row and after a writer packed it into
a chunk (stores/sqlite/chunks.py keeps such rows verbatim). Every read-only command
runs in a real subprocess and must succeed, show the good events, and name the
store in its warning; ``report`` counts each corrupt row under ``skipped``.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from goodput_core.stores.sqlite import SqliteStore
from tests.support.cli_process import goodput, synthetic_job_events

RUN = "job"
CORRUPT = [  # (kind, time, step, extra) as a damaged file may hold them
    (3, 1.7e9 + 30, 7, "{not json"),
    (11, 1.7e9 + 31, None, "[1,2]"),
    (999, 1.7e9 + 32, None, None),
    (3, 1.7e9 + 33, "twelve", None),
    (3, "noon", 8, None),
]
EXPECTED_SKIPS = {"corrupt_extra": 2, "corrupt_kind": 1, "corrupt_step": 1, "corrupt_time": 1}


def _job_events():
    return synthetic_job_events(RUN)


def _store(path, events, corrupt: bool, chunk_events: int):
    s = SqliteStore(path, chunk_events=chunk_events)
    half = len(events) // 2
    s.append(events[:half])
    if corrupt:
        with sqlite3.connect(path) as conn:
            run_id, = conn.execute("SELECT run_id FROM runs WHERE name = ?", (RUN,)).fetchone()
            writer, = conn.execute("SELECT min(writer_id) FROM writers").fetchone()
            conn.executemany(
                "INSERT INTO events (run_id, writer_id, seq, kind, time, step, extra, write_time)"
                " VALUES (?, ?, 0, ?, ?, ?, ?, NULL)",
                [(run_id, writer, *row) for row in CORRUPT])
        conn.close()
    for i in range(half, len(events), 4):  # small batches: compactions along the way
        s.append(events[i:i + 4])
    s.close()


@pytest.fixture(scope="module", params=["rows", "chunks"])
def stores(request, tmp_path_factory):
    """(store with corrupt rows, the same store without them, output dir)."""
    tmp = tmp_path_factory.mktemp(f"r11-{request.param}")
    events = _job_events()
    chunk_events = 8 if request.param == "chunks" else 10 ** 6
    bad, clean = tmp / "bad.sqlite", tmp / "clean.sqlite"
    _store(bad, events, True, chunk_events)
    _store(clean, events, False, chunk_events)
    if request.param == "chunks":
        with sqlite3.connect(bad) as conn:
            packed = conn.execute("SELECT count(*) FROM chunks WHERE odd IS NOT NULL").fetchone()
            left = conn.execute("SELECT count(*) FROM events WHERE kind = 999").fetchone()
        assert packed[0] > 0 and left[0] == 0  # the corrupt rows now live in chunks
    return str(bad), str(clean), tmp, len(events)


def _ok(result, store):
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert store in result.stderr and "corrupt" in result.stderr  # names the store


def test_r11_report_skips_and_counts_each_corrupt_row(stores):
    bad, clean, _, _ = stores
    got = goodput("report", RUN, "--store", bad, "--json")
    _ok(got, bad)
    want = json.loads(goodput("report", RUN, "--store", clean, "--json").stdout)
    got = json.loads(got.stdout)
    assert {k: v for k, v in got["skipped"].items() if k.startswith("corrupt")} == EXPECTED_SKIPS
    for rep in (got, want):
        for key in ("store", "query_time", "skipped"):
            rep.pop(key)
    assert got == want  # the rest of the run is read: the same numbers


def test_r11_events_and_export_stream_every_good_event(stores):
    bad, _, tmp, n = stores
    events = goodput("events", RUN, "--store", bad)
    _ok(events, bad)
    assert len(events.stdout.splitlines()) == n
    out = tmp / "export.jsonl"
    export = goodput("export", RUN, "--store", bad, "-o", str(out))
    _ok(export, bad)
    assert len(out.read_text().splitlines()) == n


def test_r11_import_from_a_store_with_corrupt_rows(stores):
    bad, _, tmp, n = stores
    out = tmp / "imported.jsonl"
    result = goodput("import", RUN, "--from", bad, "--to", str(out))
    _ok(result, bad)
    assert len(out.read_text().splitlines()) == n


def test_r11_runs_timeline_and_monitor(stores):
    bad, _, tmp, _ = stores
    runs = goodput("runs", "--store", bad)
    assert runs.returncode == 0 and runs.stdout.split() == [RUN]
    picture = tmp / "t.html"
    _ok(goodput("timeline", RUN, "--store", bad, "-o", str(picture)), bad)
    assert 'data-category="PRODUCTIVE"' in picture.read_text()
    monitor = goodput("monitor", RUN, "--store", bad, "--once")
    _ok(monitor, bad)
    assert "goodput" in monitor.stdout.lower()
