"""R13/R14 on a real PostgreSQL server: a store that never opens or refuses
writes loses nothing, and exit keeps its bound.

Each scenario writes through real ``Recorder`` processes (children started
with ``subprocess``) or the test's own recorder, against Debian's server
started by the test (tests/support/postgres_server.py). The writer role is
an ordinary role that owns its database (a superuser would ignore connection
limits and revoked privileges). Every count asserted below is the number of
events the test recorded: each must be stored exactly once, by the same or
the next process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import psycopg
import pytest

from goodput_core import Recorder
from tests.support.postgres_server import skip_without_postgres

skip_without_postgres()  # .ci/run and `make test` install it

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLE_PW = "w-pass"

# A writer process: records N step starts (times 1000.0 + i), flushes with a
# timeout, prints its flush result and stats, then the moment it starts to exit.
_WRITER = textwrap.dedent("""
    import json, sys, time
    from goodput_core import Recorder
    url, run, n, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    rec = Recorder(run, url, flush_interval_s=0.05)
    for i in range(n):
        rec.record_step_start_time(i, 1000.0 + i)
    ok = rec.flush(timeout)
    stats = rec.stats()
    print(json.dumps({"flush": ok, "stats": stats}), flush=True)
    print("EXIT", time.monotonic(), flush=True)
""")


def _admin(postgres_server, database="postgres"):
    return psycopg.connect(postgres_server.url(database), autocommit=True)


@pytest.fixture
def env(tmp_path, monkeypatch):
    """Private spill directories for this test and its children."""
    monkeypatch.setenv("GOODPUT_SPILL_DIR", str(tmp_path / "spill"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, e.get("PYTHONPATH")]))
    return e


@pytest.fixture
def role_url(postgres_server):
    """A fresh database owned by a fresh ordinary role; the role's URL."""
    role = "w_" + uuid.uuid4().hex[:10]
    db = "d_" + uuid.uuid4().hex[:10]
    with _admin(postgres_server) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{ROLE_PW}'")
        conn.execute(f'CREATE DATABASE "{db}" OWNER {role}')
    return role, db, postgres_server.url(db, user=role, password=ROLE_PW)


def _run_writer(env, url, run, n, timeout, limit=120):
    proc = subprocess.run([sys.executable, "-c", _WRITER, url, run, str(n), str(timeout)],
                          capture_output=True, text=True, env=env, timeout=limit, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    return json.loads(lines[0]), proc.stderr


def _stored(postgres_server, db, run):
    """(events of ``run``, distinct (writer, seq) pairs) as the database holds them."""
    with _admin(postgres_server, db) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT (e.writer_id, e.seq)) FROM goodput.events e "
            "JOIN goodput.runs r USING (run_id) WHERE r.name = %s", (run,)).fetchone()
    return tuple(row)


def test_server_down_for_the_writers_whole_life_the_next_process_delivers(
        postgres_server, role_url, env):
    role, db, url = role_url
    postgres_server.stop()
    try:
        out, err = _run_writer(env, url, "down", 3000, 30.0)
    finally:
        postgres_server.start()
    stats = out["stats"]
    # never stored, never dropped: all 3,000 wait in the writer's spill file
    assert out["flush"] is False
    assert (stats["written"], stats["spilled"], stats["dropped"]) == (0, 3000, 0)
    assert stats["store_error"] and "cannot open the store" in stats["store_error"]
    assert "3000 events not stored in" in err and "are kept in" in err, err
    # the next process that opens the store delivers them, once
    out, _ = _run_writer(env, url, "later", 10, 60.0)
    assert out["flush"] is True
    assert out["stats"]["spill_adopted"] == 3000
    assert _stored(postgres_server, db, "down") == (3000, 3000)
    assert _stored(postgres_server, db, "later") == (10, 10)
    assert os.listdir(env["GOODPUT_SPILL_DIR"]) == []  # delivered files are deleted
    # a third process finds nothing left to deliver: nothing doubles
    out, _ = _run_writer(env, url, "third", 1, 60.0)
    assert out["stats"]["spill_adopted"] == 0
    assert _stored(postgres_server, db, "down") == (3000, 3000)


def test_four_writers_of_one_run_while_down_two_deliverers_at_once_store_each_once(
        postgres_server, role_url, env):
    role, db, url = role_url

    def start(run, n, timeout):
        return subprocess.Popen([sys.executable, "-c", _WRITER, url, run, str(n), str(timeout)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, cwd=ROOT)

    def results(procs):
        out = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=120)
            assert p.returncode == 0, stderr
            out.append(json.loads(stdout.splitlines()[0]))
        return out

    postgres_server.stop()
    try:  # four processes of one run at once: four spill files
        spilled = results([start("multi", 500, 30.0) for _ in range(4)])
    finally:
        postgres_server.start()
    # flush answers False as soon as the open failed: all 500 of each are spilled
    assert [(r["flush"], r["stats"]["spilled"]) for r in spilled] == [(False, 500)] * 4
    assert len([n for n in os.listdir(env["GOODPUT_SPILL_DIR"]) if n.endswith(".jsonl")]) == 4
    # two processes open the store at once: each file is taken by one of them
    delivered = results([start("deliver", 0, 60.0) for _ in range(2)])
    assert all(r["flush"] for r in delivered)
    assert sum(r["stats"]["spill_adopted"] for r in delivered) == 2000
    assert _stored(postgres_server, db, "multi") == (2000, 2000)


def test_out_of_connection_slots_is_an_outage_not_a_loss(postgres_server, role_url, env):
    role, db, url = role_url
    with _admin(postgres_server) as conn:
        conn.execute(f"ALTER ROLE {role} CONNECTION LIMIT 0")  # "too many connections"
    try:
        out, err = _run_writer(env, url, "slots", 2000, 30.0)
    finally:
        with _admin(postgres_server) as conn:
            conn.execute(f"ALTER ROLE {role} CONNECTION LIMIT -1")
    assert out["flush"] is False
    assert "too many connections" in out["stats"]["store_error"]
    assert (out["stats"]["spilled"], out["stats"]["written"]) == (2000, 0)
    out, _ = _run_writer(env, url, "after", 0, 60.0)
    assert out["flush"] is True
    assert _stored(postgres_server, db, "slots") == (2000, 2000)


def _set_read_only(postgres_server, on: bool) -> None:
    with _admin(postgres_server) as conn:
        conn.execute(f"ALTER SYSTEM SET default_transaction_read_only = {'on' if on else 'off'}")
        conn.execute("SELECT pg_reload_conf()")


def test_read_only_for_a_while_then_writable_stores_every_event_once(postgres_server, role_url,
                                                                    env):
    role, db, url = role_url
    rec = Recorder("ro", url, flush_interval_s=0.05)
    try:
        for i in range(500):
            rec.record_step_start_time(i, 1000.0 + i)
        assert rec.flush(30)
        _set_read_only(postgres_server, True)
        try:
            for i in range(500, 1000):
                rec.record_step_start_time(i, 1000.0 + i)
            # a bounded wait while the server refuses (~4 s): not stored, and said so
            assert rec.flush(4.0) is False
            stats = rec.stats()
            # waiting: in the store's queue, or (on a slow machine) still in the recorder's
            assert stats["store"]["pending"] + stats["waiting"] == 500
            assert stats["store"]["rejected"] == 0 and stats["unstorable"] == 0
            assert "read-only" in stats["store"]["last_error"]
        finally:
            _set_read_only(postgres_server, False)
        assert rec.flush(60)
        stats = rec.stats()
        assert stats["store"]["pending"] == 0 and stats["store"]["rejected"] == 0
        assert _stored(postgres_server, db, "ro") == (1000, 1000)
    finally:
        rec.close(5)


def test_insert_revoked_then_granted_stores_every_event_once(postgres_server, role_url, env):
    role, db, url = role_url
    rec = Recorder("grant", url, flush_interval_s=0.05)
    try:
        rec.record_step_start_time(0, 1000.0)
        assert rec.flush(30)  # the tables exist, owned by the writer's role
        with _admin(postgres_server, db) as conn:
            conn.execute(f"REVOKE INSERT ON ALL TABLES IN SCHEMA goodput FROM {role}")
        for i in range(1, 700):
            rec.record_step_start_time(i, 1000.0 + i)
        assert rec.flush(2.0) is False
        stats = rec.stats()
        assert stats["store"]["pending"] + stats["waiting"] == 699
        assert stats["store"]["rejected"] == 0
        assert "permission denied" in stats["store"]["last_error"]
        with _admin(postgres_server, db) as conn:
            conn.execute(f"GRANT INSERT ON ALL TABLES IN SCHEMA goodput TO {role}")
        assert rec.flush(60)
        assert _stored(postgres_server, db, "grant") == (700, 700)
    finally:
        rec.close(5)


def test_missing_tables_are_an_outage_not_bad_content(postgres_server, role_url, env):
    from goodput_core.stores.postgres.store import refusal_is_outage

    role, db, url = role_url
    with _admin(postgres_server, db) as conn:
        with pytest.raises(psycopg.Error) as missing:
            conn.execute("INSERT INTO no_such_table VALUES (1)")
        with pytest.raises(psycopg.Error) as bad:
            conn.execute("SELECT 'x'::int")  # a value the server cannot take: content
    assert refusal_is_outage(missing.value)
    assert not refusal_is_outage(bad.value)


def test_tables_dropped_under_a_live_writer_are_created_again(postgres_server, role_url, env):
    role, db, url = role_url
    rec = Recorder("dropped", url, flush_interval_s=0.05)
    try:
        rec.record_step_start_time(0, 1000.0)
        assert rec.flush(30)
        with _admin(postgres_server, db) as conn:
            conn.execute("DROP SCHEMA goodput CASCADE")  # the first event goes with it
        for i in range(1, 101):
            rec.record_step_start_time(i, 1000.0 + i)
        assert rec.flush(60)
        stats = rec.stats()
        assert stats["store"]["rejected"] == 0 and stats["unstorable"] == 0
        # the 100 recorded after the drop, each once, under a fresh run id
        assert _stored(postgres_server, db, "dropped") == (100, 100)
    finally:
        rec.close(5)


def test_nul_in_a_run_name_is_an_error_at_the_api_edge():
    with pytest.raises(ValueError, match="NUL"):
        Recorder("a\x00b", "memory://nul")


# The exit bound: a writer whose server is stopped with SIGSTOP (it accepts TCP
# connections in the kernel and never answers) or refusing connections.
_EXITER = textwrap.dedent("""
    import sys, time
    from goodput_core import Recorder
    url, run, n, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    rec = Recorder(run, url, flush_interval_s=0.05)
    if mode == "opened":
        rec.record_step_start_time(0, 1000.0)
        assert rec.flush(30), rec.stats()  # the store is open before the server stops
        sys.stdout.write("EXIT %r\\n" % time.monotonic())
        sys.stdout.flush()
        sys.stdin.readline()  # the test black-holes the server now
    for i in range(1, n + 1):
        rec.record_step_start_time(i, 1000.0 + i)
    sys.stdout.write("EXIT %r\\n" % time.monotonic())
    sys.stdout.flush()
""")


def _cluster_pids(postgres_server):
    """The postmaster and every process it started (its backends, its workers)."""
    with open(os.path.join(postgres_server.data, "postmaster.pid")) as f:
        postmaster = int(f.readline())
    pids = [postmaster]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == postmaster:
                        pids.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return pids


def _signal_all(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _exit_after(proc, stop_first=None):
    """Seconds from the child's last 'EXIT' line to its end (monotonic clock,
    shared by parent and child on Linux)."""
    if stop_first is not None:
        first = proc.stdout.readline()
        assert first.startswith("EXIT"), first + proc.stderr.read()
        stop_first()
        proc.stdin.write("\n")
        proc.stdin.flush()
    last = proc.stdout.readline()
    assert last.startswith("EXIT"), last + proc.stderr.read()
    proc.wait(timeout=60)
    return time.monotonic() - float(last.split()[1]), proc.stderr.read()


@pytest.mark.parametrize("mode", ["never", "opened"])
def test_exit_with_the_server_black_holed_keeps_the_bound(postgres_server, role_url, env, mode):
    """``never``: SIGSTOP before the writer starts (its first connection hangs);
    ``opened``: the store is open, then every server process is stopped."""
    role, db, url = role_url
    run = "bh-" + mode
    stopped = []

    def stop():
        stopped.extend(_cluster_pids(postgres_server))
        _signal_all(stopped, signal.SIGSTOP)

    if mode == "never":
        stop()
    proc = subprocess.Popen([sys.executable, "-c", _EXITER, url, run, "400", mode],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        took, err = _exit_after(proc, stop if mode == "opened" else None)
    finally:
        _signal_all(stopped, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # the documented bound is 5 s in all; 1 s of slack for the interpreter's own
    # teardown on a loaded machine
    assert took < 6.0, (took, err)
    assert "kept in" in err, err
    # nothing lost: the next process delivers what the first left behind
    expected = 400 if mode == "never" else 401
    out, _ = _run_writer(env, url, "next-" + run, 0, 60.0)
    assert out["flush"] is True
    assert _stored(postgres_server, db, run) == (expected, expected)


def test_exit_with_the_server_refusing_keeps_the_bound(postgres_server, role_url, env):
    role, db, url = role_url
    postgres_server.stop()  # connections refused at once
    try:
        proc = subprocess.Popen([sys.executable, "-c", _EXITER, url, "refused", "300", "never"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        took, err = _exit_after(proc)
    finally:
        postgres_server.start()
    assert took < 6.0, (took, err)
    assert "300 events not stored" in err, err
    out, _ = _run_writer(env, url, "after-refused", 0, 60.0)
    assert out["flush"] is True
    assert _stored(postgres_server, db, "refused") == (300, 300)
