"""The PostgreSQL store beside SQLite: ingest, read, end-to-end report (run by hand).

Usage (from the repository root; needs Debian's ``postgresql`` package, no
running server: the script starts a throwaway one on loopback and removes it)::

    python benchmarks/bench_postgres.py [--events 1000000] [--writers 8] [--repeats 3]

Each repeat, on a fresh database:

* **ingest, 1 writer**: one process appends ``--events`` events in batches of
  5,000 (what the recorder's writer thread does) and flushes; events/s from
  the first append to the end of the flush (every event committed);
* **ingest, N writers**: ``--writers`` processes append ``--events / N``
  events each to the same run at once; events/s for all of them together;
* **read**: one ``read`` of the whole run (EventRecords: what ``goodput events``
  and ``export`` page through);
* **read_columns**: the same as numpy columns (what a cold calculator, the
  report and the monitor read);
* **report**: ``goodput report RUN --store URL`` end to end (process start,
  read, compute, print), beside the same command on a SQLite file holding
  the same events.

Prints the machine and the median (min-max) of each figure. Events are those
of ``bench_store.make_events`` (step starts/ends, a custom event every 100 steps).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]

from _machine import machine  # noqa: E402
from bench_store import make_events  # noqa: E402

from goodput_core.stores.postgres import PostgresStore  # noqa: E402
from goodput_core.stores.sqlite import SqliteStore  # noqa: E402
from tests.support.postgres_server import PostgresServer  # noqa: E402

_WRITER = """
import sys, time
sys.path[:0] = [{root!r}, {here!r}]
from bench_store import make_events
from goodput_core.stores.postgres import PostgresStore
url, index, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
events = [e._replace(attempt=f"w{{index}}") for e in make_events(n)]
store = PostgresStore(url)
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()  # all writers start together
for i in range(0, n, 5000):
    store.append(events[i:i + 5000])
assert store.flush(600)
store.close()
"""


def _ingest_parallel(url: str, writers: int, per_writer: int) -> float:
    code = _WRITER.format(root=ROOT, here=HERE)
    procs = [subprocess.Popen([sys.executable, "-c", code, url, str(i), str(per_writer)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for i in range(writers)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        assert p.wait(timeout=1800) == 0
    return writers * per_writer / (time.perf_counter() - t0)


def _report_seconds(store_url: str) -> float:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "goodput_core.cli", "report", "bench",
                          "--store", store_url], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    return time.perf_counter() - t0


def one_repeat(server: PostgresServer, events: list, writers: int) -> dict:
    n = len(events)
    out = {}
    db = "b" + uuid.uuid4().hex[:10]
    server.create_database(db)
    url = server.url(db)
    store = PostgresStore(url)
    t0 = time.perf_counter()
    for i in range(0, n, 5000):
        store.append(events[i:i + 5000])
    assert store.flush(1800)
    out["ingest_1"] = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    got, _ = store.read("bench")
    out["read"] = n / (time.perf_counter() - t0)
    assert len(got) == n
    del got
    t0 = time.perf_counter()
    page, _ = store.read_columns("bench")
    out["read_columns"] = n / (time.perf_counter() - t0)
    assert len(page) == n
    del page
    store.close()
    out["report_pg"] = _report_seconds(url)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.sqlite")
        lite = SqliteStore(path)
        for i in range(0, n, 5000):
            lite.append(events[i:i + 5000])
        lite.close()
        out["report_sqlite"] = _report_seconds(path)
    db = "p" + uuid.uuid4().hex[:10]
    server.create_database(db)
    out["ingest_n"] = _ingest_parallel(server.url(db), writers, n // writers)
    return out


def _fmt(values: list, unit: str) -> str:
    med = statistics.median(values)
    if unit == "s":
        return f"{med:8.2f} s (min {min(values):.2f}, max {max(values):.2f})"
    return f"{med:>12,.0f} events/s (min {min(values):,.0f}, max {max(values):,.0f})"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    server = PostgresServer(fsync=True)
    server.start()
    try:
        import psycopg

        with psycopg.connect(server.url(), autocommit=True) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
        print(f"machine: {machine()}; PostgreSQL {version} on loopback (fsync on)")
        print(f"{args.events:,} events, {args.writers} writers, {args.repeats} repeats")
        events = make_events(args.events)
        runs = [one_repeat(server, events, args.writers) for _ in range(args.repeats)]
    finally:
        server.stop()
        server.remove()
    col = {k: [r[k] for r in runs] for k in runs[0]}
    print(f"ingest, 1 writer          : {_fmt(col['ingest_1'], 'ev')}")
    print(f"ingest, {args.writers} writers together : {_fmt(col['ingest_n'], 'ev')}")
    print(f"read (one call)           : {_fmt(col['read'], 'ev')}")
    print(f"read_columns (one call)   : {_fmt(col['read_columns'], 'ev')}")
    print(f"goodput report, postgres  : {_fmt(col['report_pg'], 's')}")
    print(f"goodput report, sqlite    : {_fmt(col['report_sqlite'], 's')}")
    ratio = statistics.median(p / s for p, s in zip(col["report_pg"], col["report_sqlite"]))
    print(f"report postgres / sqlite  : x{ratio:.2f}")


if __name__ == "__main__":
    main()
