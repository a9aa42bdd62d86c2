"""The PostgreSQL store against a real PostgreSQL server on loopback.

Each test module run starts its own throwaway cluster (Debian's ``postgresql``
binaries, see tests/support/postgres_server.py); every test gets a fresh
database. The outage test starts a server of its own and stops/starts it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import psycopg
import pytest

from goodput_core import Calculator, Recorder
from goodput_core.events import EventRecord
from goodput_core.stores import StoreError, open_store
from goodput_core.stores.memory import MemoryStore
from goodput_core.stores.postgres import PostgresStore
from goodput_core.stores.postgres.sql import SCHEMA_VERSION
from tests.support.children import wait_child
from tests.support.fake_clock import FakeClock
from tests.support.postgres_server import PASSWORD, PostgresServer, skip_without_postgres

skip_without_postgres()  # .ci/run and `make test` install it

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _events(run, n, *, attempt="a1", seq0=1, t0=1000.0, pid=42):
    """A job start then ``n`` steps 1 s apart and a job end (kinds from a real Recorder)."""
    store = MemoryStore()
    clock = FakeClock(t0)
    rec = Recorder(run, store, clock=clock, strict=True)
    rec.record_job_start_time()
    for step in range(n):
        clock.advance(1.0)
        rec.record_step_start_time(step)
    clock.advance(1.0)
    rec.record_job_end_time()
    rec.flush()
    rec.close()
    events, _ = store.read(run)
    return [e._replace(attempt=attempt, seq=seq0 + i, pid=pid) for i, e in enumerate(events)]


def test_round_trip_and_the_same_goodput_as_memory(postgres_url):
    events = _events("run-a", 50)
    store = PostgresStore(postgres_url)
    store.append(events)
    assert store.flush(10)
    back, cursor = store.read("run-a")
    assert back == events
    assert isinstance(cursor, int)
    mem = MemoryStore()
    mem.append(events)
    want, got = Calculator("run-a", mem), Calculator("run-a", store)
    want.refresh(), got.refresh()
    assert got.cumulative().goodput == pytest.approx(want.cumulative().goodput, abs=0)
    assert got.cumulative().total_seconds == 51.0
    store.close()


def test_nan_times_and_odd_extras_round_trip(postgres_url):
    store = PostgresStore(postgres_url)
    e = EventRecord("r", 1, math.nan, None, {"x": [1, "two", None], "q": 'it\'s "quoted"'},
                    3, "host-é", 7, "att", 1, math.nan)
    store.append([e])
    assert store.flush(10)
    (back,), _ = store.read("r")
    assert math.isnan(back.time) and math.isnan(back.write_time)
    assert back._replace(time=0.0, write_time=0.0) == e._replace(time=0.0, write_time=0.0)
    store.close()


def test_incremental_reads_by_cursor_and_limit(postgres_url):
    events = _events("run-b", 20)
    store = PostgresStore(postgres_url)
    store.append(events[:10])
    assert store.flush(10)
    first, cursor = store.read("run-b")
    store.append(events[10:])
    assert store.flush(10)
    rest, cursor2 = store.read("run-b", since=cursor)
    assert first + rest == events
    none, cursor3 = store.read("run-b", since=cursor2)
    assert none == [] and cursor3 == cursor2
    page, c = store.read("run-b", limit=7)
    assert page == events[:7]
    assert store.read("run-b", since=c, limit=100)[0] == events[7:]
    assert store.read("no-such-run") == ([], None)
    store.close()


def test_a_resent_batch_is_stored_once(postgres_url, caplog):
    """A resend is expected (a lost reply), not an error: the conflict clause
    skips it silently. Mutation killed: the ``ON CONFLICT ... DO NOTHING`` of the
    insert removed (the batch is then refused, retried event by event with a
    warning, and every duplicate counted as ``rejected``: still stored once, so
    only the warning and the count tell)."""
    events = _events("run-c", 30)
    store = PostgresStore(postgres_url)
    with caplog.at_level("WARNING", logger="goodput"):
        store.append(events)
        store.append(events[5:15])  # the same writer and sequence numbers again
        assert store.flush(10)
        # A batch whose reply was lost is sent again by the sender: same path.
        store._send([{"e": [e.run, e.kind, e.time, e.step, None if e.extra is None
                                    else json.dumps(e.extra), e.process_index, e.host, e.pid,
                                    e.attempt, e.seq, e.write_time]} for e in events[:3]])
    assert store.read("run-c")[0] == events
    assert store.stats()["rejected"] == 0
    assert not [r for r in caplog.records if r.levelno >= 30], caplog.text
    store.close()


def test_events_without_writer_metadata_are_all_kept(postgres_url):
    """Foreign events (seq 0, no attempt) have no identity: none is deduplicated away."""
    store = PostgresStore(postgres_url)
    e = EventRecord("run-f", 1, 5.0, 0, write_time=6.0)
    store.append([e, e, e])
    assert store.flush(10)
    assert store.read("run-f")[0] == [e, e, e]
    store.close()


def test_hostile_run_names_are_just_names(postgres_url):
    names = ["x'; DROP TABLE goodput.events; --", 'q"uote', "back\\slash", "ünï cødé",
             "%s %(x)s {}", "run-1"]
    store = PostgresStore(postgres_url)
    for i, name in enumerate(names):
        store.append([EventRecord(name, 1, 1.0 + i, None, None, 0, "h", 1, "a", i + 1)])
    assert store.flush(10)
    assert store.runs() == names
    for name in names:
        assert [e.run for e in store.read(name)[0]] == [name]
    store.close()


def test_one_unstorable_event_is_rejected_alone(postgres_url):
    good = _events("run-d", 10)
    bad = [good[0]._replace(run="nul\x00name", seq=900),          # text cannot hold NUL
           good[1]._replace(step=2 ** 63, seq=901)]               # beyond BIGINT
    store = PostgresStore(postgres_url)
    store.append(good[:5] + bad + good[5:])
    assert store.flush(10)
    assert store.read("run-d")[0] == good
    assert store.stats()["rejected"] == 2
    store.close()


def test_schema_parameter_and_runs_listing(postgres_url, postgres_server):
    a = PostgresStore(postgres_url + "?schema=team_a")
    b = open_store(postgres_url + "?schema=team_b")
    a.append([EventRecord("only-a", 1, 1.0, None, None, 0, "h", 1, "x", 1)])
    assert a.flush(10) and b.runs() == [] and a.runs() == ["only-a"]
    with pytest.raises(StoreError, match="schema"):
        PostgresStore(postgres_url + "?schema=bad;name")
    a.close(), b.close()


def test_a_newer_schema_is_refused(postgres_url):
    PostgresStore(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE goodput.meta SET value = %s WHERE key = 'schema_version'",
                     (str(SCHEMA_VERSION + 1),))
    with pytest.raises(StoreError, match=f"version {SCHEMA_VERSION + 1}") as info:
        PostgresStore(postgres_url)
    assert PASSWORD not in str(info.value)


def test_start_up_errors_are_one_line_and_hide_the_password(postgres_server):
    cases = {
        postgres_server.url("postgres", password="wrong-" + PASSWORD):
            "password authentication failed",
        postgres_server.url("no_such_db"): 'database "no_such_db" does not exist',
        f"postgresql://u:{PASSWORD}@127.0.0.1:1/db": "cannot connect",
    }
    for bad, message in cases.items():
        with pytest.raises(StoreError) as info:
            open_store(bad)
        text = str(info.value)
        assert message in text and "\n" not in text
        assert PASSWORD not in text and "***" in text
    with pytest.raises(StoreError, match='invalid URI query parameter: "bogus"') as info:
        open_store(f"postgresql://u:{PASSWORD}@127.0.0.1:5432/db?bogus=1")
    assert PASSWORD not in str(info.value) and "fix that URL parameter" in str(info.value)


def test_store_from_the_environment_and_the_recorder(postgres_url, monkeypatch):
    monkeypatch.setenv("GOODPUT_STORE", postgres_url.replace("postgresql://", "postgres://"))
    rec = Recorder("env-run")
    rec.record_job_start_time(100.0)
    rec.record_step_start_time(0, 101.0)
    rec.record_job_end_time(105.0)
    assert rec.flush(10)
    calc = Calculator("env-run", postgres_url)
    calc.refresh()
    assert calc.cumulative().total_seconds == 5.0
    assert repr(rec._store).count(PASSWORD) == 0
    rec.close()


_WRITER = textwrap.dedent("""
    import sys
    from goodput_core import Recorder
    url, index, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rec = Recorder("many", url, process_index=index, queue_size=10 * n)
    for step in range(n):
        rec.record_step_start_time(step, 1000.0 + step)
    rec.record_custom_badput_event_start_time(2000.0, f"p{index}")
    assert rec.flush(60), rec.stats()
""")


def test_sixteen_processes_write_one_run_while_a_reader_reads(postgres_url):
    n, procs = 500, 16
    env = dict(os.environ, PYTHONPATH=ROOT)
    children = [subprocess.Popen([sys.executable, "-c", _WRITER, postgres_url, str(i), str(n)],
                                 env=env, stdin=subprocess.DEVNULL) for i in range(procs)]
    reader = PostgresStore(postgres_url)
    calc = Calculator("many", reader)  # the monitor's way: incremental refreshes
    seen, cursor = [], None
    while any(c.poll() is None for c in children):
        batch, cursor = reader.read("many", since=cursor)
        seen += batch
        calc.refresh()
        calc.cumulative()
    for c in children:
        assert c.wait(timeout=120) == 0
    batch, cursor = reader.read("many", since=cursor)
    seen += batch
    calc.refresh()
    one_shot = Calculator("many", postgres_url)
    one_shot.refresh()
    assert calc.cumulative(now=5000.0) == one_shot.cumulative(now=5000.0)
    # Every event exactly once, and the incremental reads saw exactly the whole table.
    assert len(seen) == procs * (n + 1)
    assert len({(e.attempt, e.seq) for e in seen}) == len(seen)
    assert reader.read("many")[0] == seen
    for index in range(procs):
        steps = [e.step for e in seen if e.process_index == index and e.step is not None]
        assert steps == list(range(n))  # each writer's events in its own order
    reader.close()


def test_server_restart_mid_run_loses_and_duplicates_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    srv = PostgresServer()
    srv.start()
    try:
        srv.create_database("outage")
        store = PostgresStore(srv.url("outage"), max_buffer=50, backoff_initial_s=0.01,
                              backoff_max_s=0.05, connect_timeout_s=1)
        clock = FakeClock(1000.0)
        rec = Recorder("restart", store, clock=clock)
        rec.record_job_start_time()
        for step in range(100):
            clock.advance(1.0)
            rec.record_step_start_time(step)
        assert rec.flush(10)
        reader = PostgresStore(srv.url("outage"))
        before, cursor = reader.read("restart")
        srv.stop()
        for step in range(100, 400):  # the writer keeps accepting; memory stays bounded
            clock.advance(1.0)
            rec.record_step_start_time(step)
        assert not rec.flush(0.5)  # nothing can be delivered while the server is down
        stats = store.stats()
        assert stats["in_memory"] <= 50 and stats["on_disk"] > 0
        srv.start()
        rec.record_job_end_time()
        assert rec.flush(60)
        after, _ = reader.read("restart", since=cursor)  # the reader reconnects by itself
        events = before + after
        assert [e.step for e in events if e.kind == events[1].kind] == list(range(400))
        assert len({e.seq for e in events}) == len(events) == 402
        rec.close()
        reader.close()
    finally:
        srv.stop()
        srv.remove()


def test_events_left_by_a_process_during_an_outage_are_delivered_by_the_next(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    srv = PostgresServer()
    srv.start()
    try:
        srv.create_database("later")
        url = srv.url("later")
        store = PostgresStore(url, backoff_initial_s=0.01, backoff_max_s=0.05)
        srv.stop()
        store.append(_events("left", 10))
        assert store.close(0.3) is False  # unreachable: kept in a spill file
        srv.start()
        successor = PostgresStore(url)
        assert successor.flush(30)
        assert successor.read("left")[0] == _events("left", 10)
        successor.close()
    finally:
        srv.stop()
        srv.remove()


def test_a_forked_child_writes_through_its_own_connection(postgres_url):
    store = PostgresStore(postgres_url)
    store.append([EventRecord("fork", 1, 1.0, None, None, 0, "h", 1, "parent", 1)])
    assert store.flush(10)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            store.append([EventRecord("fork", 1, 2.0, None, None, 0, "h", 2, "child", 1)])
            code = 0 if store.flush(20) else 2
        finally:
            os._exit(code)
    assert wait_child(pid, 60, "child writing to PostgreSQL after fork") == 0
    # The parent's connection still works after the child went away.
    store.append([EventRecord("fork", 1, 3.0, None, None, 0, "h", 1, "parent", 2)])
    assert store.flush(10)
    assert sorted(e.time for e in store.read("fork")[0]) == [1.0, 2.0, 3.0]
    store.close()


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "goodput_core.cli", *args],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})), timeout=120)


def test_import_and_export_both_ways_with_sqlite(postgres_url, tmp_path):
    sqlite = tmp_path / "a.sqlite"
    src = open_store(str(sqlite))
    src.append(_events("moved", 40))
    src.close()
    out = _cli("import", "moved", "--from", str(sqlite), "--to", postgres_url)
    assert out.returncode == 0, out.stderr
    again = _cli("import", "moved", "--from", str(sqlite), "--to", postgres_url)  # idempotent
    assert again.returncode == 0, again.stderr
    back = tmp_path / "b.sqlite"
    out = _cli("import", "moved", "--from", postgres_url, "--to", str(back))
    assert out.returncode == 0, out.stderr
    reports = [_cli("report", "moved", "--store", s, "--json") for s in (str(sqlite), postgres_url,
                                                                        str(back))]
    assert all(r.returncode == 0 for r in reports), [r.stderr for r in reports]
    parsed = [json.loads(r.stdout) for r in reports]
    for key in ("goodput_percent", "total_seconds", "badput_seconds", "last_step"):
        assert parsed[0][key] == parsed[1][key] == parsed[2][key]
    assert parsed[0]["total_seconds"] == 41.0 and parsed[0]["last_step"] == 39
    assert PASSWORD not in reports[1].stdout and "***" in parsed[1]["store"]
    pg = PostgresStore(postgres_url)
    assert len(pg.read("moved")[0]) == 42
    pg.close()
    runs = _cli("runs", "--store", postgres_url)
    assert runs.returncode == 0 and "moved" in runs.stdout
    assert PASSWORD not in runs.stdout + runs.stderr
    monitor = _cli("monitor", "moved", "--store", postgres_url, "--once")
    assert monitor.returncode == 0, monitor.stderr
    assert "97.56" in monitor.stdout and PASSWORD not in monitor.stdout + monitor.stderr
