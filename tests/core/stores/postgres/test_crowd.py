"""More recording processes than the server has connections, and pgbouncer.

Real servers started here (Debian's ``postgresql`` and ``pgbouncer``), real
recording processes. What must hold: every event stored exactly once, none
lost; a process writes through one connection at most and, while the
server refuses it, retries after a growing delay instead of in a loop.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time

import psycopg

from goodput_core.stores import StoreError
from goodput_core.stores.postgres import PostgresStore
from tests.support.pgbouncer_server import Pgbouncer, skip_without_pgbouncer
from tests.support.postgres_server import PostgresServer, skip_without_postgres

skip_without_postgres()  # .ci/run and `make test` install it

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
WRITER, WRITER_PW = "writer", "writer-pw"  # no superuser: the slots reserved for those are not its

#: One recording process: THREADS recorders (one per thread, as per-host recording
#: with many ranks per process would have), N events each; then it waits BLOCKED_S
#: for a delivery that cannot happen (the server is full), reports, waits for the
#: test to free the server, flushes and reports again.
_CROWD = textwrap.dedent("""
    import json, sys, threading
    from goodput_core import Recorder
    from goodput_core.stores.postgres.connect import slot_counts
    url, proc, threads, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    blocked_s = float(sys.argv[5])
    recs = [Recorder("crowd", url, process_index=proc * threads + i, queue_size=10 * n,
                     hang_detection=False) for i in range(threads)]
    def work(rec):
        rec.record_job_start_time(1000.0)
        for step in range(n - 1):
            rec.record_step_start_time(step, 1001.0 + step)
    workers = [threading.Thread(target=work, args=(r,)) for r in recs]
    for t in workers: t.start()
    for t in workers: t.join()
    stuck = recs[0].flush(blocked_s)
    print(json.dumps({"stuck_delivered": stuck, "counts": slot_counts()}), flush=True)
    sys.stdin.readline()
    ok = all(r.flush(180) for r in recs)
    print(json.dumps({"ok": ok, "counts": slot_counts(),
                      "unstorable": sum(r.stats()["unstorable"] for r in recs)}), flush=True)
    for r in recs: r.close()
""")


def _spawn(code, *args, env=None):
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)],
                            env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _stored(url):
    """(events, distinct (writer, seq), {process_index: [steps in id order]})."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT w.process_index, e.seq, e.step FROM goodput.events e"
                            " JOIN goodput.writers w USING (writer_id) ORDER BY e.id").fetchall()
    steps = {}
    for index, _, step in rows:
        if step is not None:
            steps.setdefault(index, []).append(step)
    return len(rows), len({(r[0], r[1]) for r in rows}), steps


def _refusals_logged(server) -> int:
    with open(server.log_path, errors="replace") as f:
        return sum("remaining connection slots are reserved" in line
                   or "too many clients" in line for line in f)


def test_300_recorders_in_6_processes_against_20_connections(tmp_path):
    procs, threads, n, blocked_s = 6, 50, 100, 3.0
    srv = PostgresServer(max_connections=20)
    srv.start()
    blockers = []
    try:
        srv.create_database("crowd")
        srv.create_role(WRITER, WRITER_PW, "crowd")
        url = f"postgresql://{WRITER}:{WRITER_PW}@127.0.0.1:{srv.port}/crowd"
        # Fill every slot a non-superuser may take (20 - 3 reserved): the writers
        # find the server full from their first attempt until we let go.
        blockers = [psycopg.connect(url) for _ in range(17)]
        children = [_spawn(_CROWD, url, i, threads, n, blocked_s,
                           env={"XDG_CACHE_HOME": str(tmp_path / f"cache{i}"),
                                "PGAPPNAME": f"crowd{i}"}) for i in range(procs)]
        first = [json.loads(c.stdout.readline()) for c in children]
        assert not any(r["stuck_delivered"] for r in first)  # the server really was full
        refused = [r["counts"].get("refused", 0) for r in first]
        # Backing off, not spinning: the delay before attempt k+1 is at least half of
        # 0.2 s * 2**(k-1) (jitter 0.5-1.5), so in BLOCKED_S (+ start-up slack of the
        # same length) at most 1 + log2(1 + 2 * BLOCKED_S / 0.1) attempts: 7 here. A loop
        # without delay makes hundreds of attempts a second.
        bound = 1 + math.log2(1 + 2 * blocked_s / 0.1)
        assert all(1 <= r <= bound for r in refused), (refused, bound)
        for b in blockers:
            b.close()
        blockers = []
        for c in children:
            c.stdin.write("go\n")
            c.stdin.flush()
        most = {}  # connections of each process seen at once, while they deliver
        with psycopg.connect(srv.url("crowd"), autocommit=True) as watch:  # superuser slot
            while any(c.poll() is None for c in children):
                for app, count in watch.execute(
                        "SELECT application_name, count(*) FROM pg_stat_activity"
                        " WHERE application_name LIKE 'crowd%' GROUP BY 1").fetchall():
                    most[app] = max(most.get(app, 0), count)
                if children[0].poll() is None:
                    time.sleep(0.02)  # sampling only: nothing below depends on it
        final = [json.loads(c.stdout.readline()) for c in children]
        assert [c.wait(timeout=60) for c in children] == [0] * procs
        assert all(r["ok"] and r["unstorable"] == 0 for r in final), final
        # One connection per process (the old store held one per recorder: 50 here).
        # A closed connection's server process may still be listed for a moment
        # after the client moved on to its next one: so 2 at most in a sample.
        assert max(most.values(), default=0) <= 2, most
        # Our counts are the server's: each refused attempt is one FATAL in its log.
        assert _refusals_logged(srv) == sum(r["counts"].get("refused", 0) for r in final)
        total, distinct, steps = _stored(srv.url("crowd"))
        assert total == distinct == procs * threads * n  # each event once, none lost
        assert sorted(steps) == list(range(procs * threads))
        assert all(s == list(range(n - 1)) for s in steps.values())
    finally:
        for b in blockers:
            b.close()
        srv.stop()
        srv.remove()


#: One writer process through pgbouncer: HALF events, report, wait for the test
#: (which restarts PostgreSQL behind pgbouncer), the other half, flush, report.
_BOUNCED = textwrap.dedent("""
    import json, sys
    from goodput_core import Recorder
    url, index, half = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rec = Recorder("bounced", url, process_index=index, queue_size=10 * half,
                   hang_detection=False)
    for step in range(half):
        rec.record_step_start_time(step, 1000.0 + step)
    print(json.dumps({"ok": rec.flush(120)}), flush=True)
    sys.stdin.readline()
    for step in range(half, 2 * half):
        rec.record_step_start_time(step, 1000.0 + step)
    ok = rec.flush(180)
    store = rec._store.open()
    print(json.dumps({"ok": ok, "rejected": store.stats()["rejected"],
                      "unstorable": rec.stats()["unstorable"]}), flush=True)
    rec.close()
""")


def test_8_writers_through_pgbouncer_in_transaction_mode_with_a_server_restart(tmp_path):
    skip_without_pgbouncer()  # `make test` installs it; an error in CI
    writers, half = 8, 2000
    srv = PostgresServer()
    srv.start()
    bouncer = Pgbouncer(srv, pool_size=2)  # 8 clients share 2 server sessions
    try:
        srv.create_database("bounced")
        bouncer.start()
        url = bouncer.url("bounced")
        children = [_spawn(_BOUNCED, url, i, half,
                           env={"XDG_CACHE_HOME": str(tmp_path / f"cache{i}")})
                    for i in range(writers)]
        assert all(json.loads(c.stdout.readline())["ok"] for c in children)
        # A reader through pgbouncer too, reading incrementally as the monitor does:
        # its connection runs the same queries again and again (psycopg would
        # prepare them on the server after 5 runs, and the next transaction may
        # land on another server session).
        reader = PostgresStore(url)
        seen, cursor = reader.read("bounced")
        for _ in range(10):
            batch, cursor = reader.read("bounced", since=cursor)
            seen += batch
        # Restart PostgreSQL behind pgbouncer while the writers go on recording.
        for c in children:
            c.stdin.write("go\n")
            c.stdin.flush()
        srv.stop()
        srv.start()
        while any(c.poll() is None for c in children):  # reads mid-phase
            try:
                batch, cursor = reader.read("bounced", since=cursor)
            except StoreError:  # during the restart; the monitor reads again next time
                continue
            seen += batch
        final = [json.loads(c.stdout.readline()) for c in children]
        assert [c.wait(timeout=60) for c in children] == [0] * writers
        # Nothing refused for its content: no "prepared statement does not exist",
        # no staging table missing in another session.
        assert all(r["ok"] and r["rejected"] == 0 and r["unstorable"] == 0 for r in final), \
            final
        total, distinct, steps = _stored(srv.url("bounced"))
        assert total == distinct == writers * 2 * half
        assert all(s == list(range(2 * half)) for s in steps.values()) and len(steps) == writers
        batch, cursor = reader.read("bounced", since=cursor)
        seen += batch
        assert len(seen) == total and len({(e.process_index, e.seq) for e in seen}) == total
        reader.close()
    finally:
        bouncer.stop()
        srv.stop()
        srv.remove()
