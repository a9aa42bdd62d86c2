"""The PostgreSQL store beside the embedded SQLite store: ingest, report, monitor.

Usage (from the repository root; needs Debian's ``postgresql`` package, no
running server: the script starts a throwaway one on loopback, fsync on, and
removes it)::

    python benchmarks/bench_postgres.py ingest [--events 640000] [--writers 1 16 64]
        [--chunk-events 65536]
    python benchmarks/bench_postgres.py report [--events 10000000] [--repeats 3]
    python benchmarks/bench_postgres.py read [--events 1000000] [--repeats 3] [--baseline DIR]

**ingest**: ``--writers`` processes append ``--events / writers`` events each
(``bench_store.make_events``, each process its own writer id) to one run at
once, in batches of 5,000 (the recorder's writer), then flush: events/s for
all of them together, from the common start to the last flush (every event
committed). The same processes then do the same into one SQLite file.
Connection use comes along: PostgreSQL connections each writer opened.
``--chunk-events 0`` makes the PostgreSQL writers pack no chunks (the cost
of packing is the difference).

**report**: one run of ``--events`` events (``bench_calculator.stream``: the
P2 job, 100 restarts) written to PostgreSQL and to SQLite, then
``goodput report RUN`` as a process over each: wall time and peak RSS
(``wait4``), medians of ``--repeats``. Then the monitor's cost per interval:
a :class:`Calculator` refreshed once (cold), then ``--repeats`` intervals
each of 10,000 new events appended and one ``refresh()`` (incremental read +
compute), and one refresh with nothing new; medians.

**read**: one run of ``--events`` events written by 2 writers (the P2 job,
batches of 10,000 alternating between the writers), then, in a fresh process
each time, ``read()`` of the whole run (records) and a :class:`Calculator`'s
first ``refresh()`` and ``cumulative()`` (many-writers mode: it reads
records): medians. ``--baseline DIR`` times the same reads with the code in
``DIR`` too (e.g. ``git archive main | tar -x -C DIR``), in the same session.
"""

from __future__ import annotations

import argparse
import itertools
import json
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

from _machine import machine, run_measured  # noqa: E402

from goodput_core.stores.postgres.chunks import CHUNK_EVENTS  # noqa: E402
from tests.support.postgres_server import PostgresServer  # noqa: E402

_WRITER = """
import json, sys, time
sys.path[:0] = [{root!r}, {here!r}]
from bench_store import make_events
kind, url, index, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
chunk_events = int(sys.argv[5])
events = [e._replace(attempt=f"w{{index}}") for e in make_events(n)]
if kind == "postgres":
    from goodput_core.stores.postgres import PostgresStore
    store = PostgresStore(url, chunk_events=chunk_events)
else:
    from goodput_core.stores.sqlite import SqliteStore
    store = SqliteStore(url)
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()  # all writers start together
for i in range(0, n, 5000):
    store.append(events[i:i + 5000])
if kind == "postgres":
    assert store.flush(1800)
stats = store.stats() if kind == "postgres" else {{}}
store.close()
print(json.dumps(stats.get("connections", {{}})))
"""


def _ingest(kind: str, url: str, writers: int, per_writer: int,
            chunk_events: int = CHUNK_EVENTS) -> tuple:
    """(events/s of all writers together, connections opened in all)."""
    code = _WRITER.format(root=ROOT, here=HERE)
    procs = [subprocess.Popen([sys.executable, "-c", code, kind, url, str(i), str(per_writer),
                               str(chunk_events)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, XDG_CACHE_HOME=tempfile.mkdtemp()))
             for i in range(writers)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    opened = 0
    for p in procs:
        opened += json.loads(p.stdout.readline()).get("opened", 0)
        assert p.wait(timeout=3600) == 0
    return writers * per_writer / (time.perf_counter() - t0), opened


def bench_ingest(server: PostgresServer, events: int, writer_counts, repeats: int,
                 chunk_events: int) -> None:
    print(f"ingest: {events:,} events in all, writers {writer_counts}, {repeats} repeats, "
          f"chunks of {chunk_events} events (0: no packing)")
    for writers in writer_counts:
        pg, lite, conns = [], [], []
        for _ in range(repeats):
            db = "i" + uuid.uuid4().hex[:10]
            server.create_database(db)
            rate, opened = _ingest("postgres", server.url(db), writers, events // writers,
                                   chunk_events)
            pg.append(rate)
            conns.append(opened)
            with tempfile.TemporaryDirectory() as tmp:
                lite.append(_ingest("sqlite", os.path.join(tmp, "i.sqlite"), writers,
                                    events // writers)[0])
        ratio = statistics.median(p / s for p, s in zip(pg, lite))
        print(f"  {writers:3d} writers: postgres {_rate(pg)}, sqlite {_rate(lite)}, "
              f"postgres/sqlite x{ratio:.2f}; connections opened {statistics.median(conns):.0f}")


def _rate(values) -> str:
    return f"{statistics.median(values):>10,.0f} ev/s ({min(values):,.0f}-{max(values):,.0f})"


def _secs(values) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def _build(store, n: int, flush_every: int = 50_000, writers: int = 1) -> float:
    """Writes the P2 workload of ``n`` events (batches of 10,000 taking turns
    between ``writers`` writer pids); returns the seconds it took."""
    from bench_calculator import stream

    events = stream(n)
    t0 = time.perf_counter()
    written = 0
    while True:
        batch = list(itertools.islice(events, 10_000))
        if not batch:
            break
        if writers > 1:
            pid = 1 + (written // 10_000) % writers
            batch = [e._replace(pid=pid) for e in batch]
        store.append(batch)
        written += len(batch)
        if written % flush_every == 0 and hasattr(store, "flush"):
            assert store.flush(600)  # the memory buffer stays below max_buffer
    if hasattr(store, "flush"):
        assert store.flush(600)
    return time.perf_counter() - t0


def _report(store_url: str) -> tuple:
    """(wall s, peak RSS MiB) of ``goodput report bench`` as a process."""
    wall, code, _, rss, err = run_measured(
        ["-m", "goodput_core.cli", "report", "bench", "--store", store_url],
        stdout=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=ROOT),
        cwd=tempfile.gettempdir())
    assert code == 0, err
    return wall, rss


def _monitor(store, n: int, repeats: int) -> tuple:
    """(cold refresh s, median refresh s after 10,000 new events, idle refresh s)."""
    from bench_calculator import stream

    from goodput_core.queries.calculator import Calculator

    calc = Calculator("bench", store)
    t0 = time.perf_counter()
    calc.refresh()
    calc.cumulative()
    cold = time.perf_counter() - t0
    tail = list(itertools.islice(stream(n, tail=10_000 * repeats), n, None))  # the run goes on
    times = []
    for i in range(repeats):
        store.append(tail[i * 10_000:(i + 1) * 10_000])
        if hasattr(store, "flush"):
            assert store.flush(600)
        t0 = time.perf_counter()
        assert calc.refresh() == 10_000
        calc.cumulative()
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    assert calc.refresh() == 0
    calc.cumulative()
    return cold, statistics.median(times), time.perf_counter() - t0


def bench_report(server: PostgresServer, n: int, repeats: int) -> None:
    from goodput_core.stores.postgres import PostgresStore
    from goodput_core.stores.sqlite import SqliteStore

    print(f"report: {n:,} events (P2 workload), {repeats} repeats")
    db = "r" + uuid.uuid4().hex[:10]
    server.create_database(db)
    url = server.url(db)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "r.sqlite")
        pg = PostgresStore(url)
        print(f"  built postgres in {_build(pg, n):.0f} s")
        lite = SqliteStore(path)
        print(f"  built sqlite in {_build(lite, n):.0f} s")
        lite.close()
        rows = {"postgres": [_report(url) for _ in range(repeats)],
                "sqlite": [_report(path) for _ in range(repeats)]}
        for name, got in rows.items():
            print(f"  goodput report, {name:8s}: {_secs([w for w, _ in got])}, peak RSS "
                  f"{statistics.median(m for _, m in got):.0f} MiB (max {max(m for _, m in got):.0f})")
        ratio = statistics.median(p[0] / s[0] for p, s in zip(rows["postgres"], rows["sqlite"]))
        print(f"  report postgres / sqlite: x{ratio:.2f}")
        lite = SqliteStore(path)
        for name, store in (("postgres", pg), ("sqlite", lite)):
            cold, step, idle = _monitor(store, n, repeats)
            print(f"  monitor, {name:8s}: cold refresh {cold:.2f} s; per interval with "
                  f"10,000 new events {step * 1000:.1f} ms; with none {idle * 1000:.1f} ms")
        pg.close()
        lite.close()


_READER = """
import json, sys, time
sys.path.insert(0, sys.argv[3])  # the code measured
from goodput_core.queries.calculator import Calculator
from goodput_core.stores.postgres import PostgresStore
url, what = sys.argv[1], sys.argv[2]
store = PostgresStore(url)
t0 = time.perf_counter()
if what == "read":
    n = len(store.read("bench")[0])
else:
    calc = Calculator("bench", store)
    n = calc.refresh()
    calc.cumulative()
print(json.dumps([time.perf_counter() - t0, n]))
store.close()
"""


def bench_read(server: PostgresServer, n: int, repeats: int, baseline: str) -> None:
    from goodput_core.stores.postgres import PostgresStore

    print(f"read: {n:,} events of 2 writers (P2 workload), {repeats} repeats")
    db = "m" + uuid.uuid4().hex[:10]
    server.create_database(db)
    url = server.url(db)
    store = PostgresStore(url)
    print(f"  built postgres in {_build(store, n, writers=2):.0f} s")
    store.close()
    counts = set()
    codes = [("this code", ROOT)] + ([("baseline", os.path.abspath(baseline))] if baseline else [])
    for what in ("read", "calculator"):
        for label, root in codes:
            walls = []
            for _ in range(repeats):
                out = subprocess.run([sys.executable, "-c", _READER, url, what, root],
                                     capture_output=True, text=True, check=True,
                                     cwd=tempfile.gettempdir())
                wall, got = json.loads(out.stdout)
                counts.add(got)
                assert len(counts) == 1, counts  # every read got every event
                walls.append(wall)
            print(f"  {what:10s} {label:10s}: {_secs(walls)}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("ingest", "report", "read"))
    parser.add_argument("--events", type=int)
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk-events", type=int, default=CHUNK_EVENTS,
                        help="ingest: events per packed chunk of the PostgreSQL writers "
                             "(0: no packing, as before packed chunks)")
    parser.add_argument("--baseline", default=None, metavar="DIR",
                        help="read: also time the reads with the code in DIR")
    args = parser.parse_args(argv)
    server = PostgresServer(fsync=True)
    server.start()
    try:
        import psycopg

        with psycopg.connect(server.url(), autocommit=True) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
        print(f"machine: {machine()}; PostgreSQL {version} on loopback (fsync on); "
              f"load average {os.getloadavg()[0]:.1f}")
        if args.what == "ingest":
            bench_ingest(server, args.events or 640_000, args.writers, args.repeats,
                         args.chunk_events)
        elif args.what == "read":
            bench_read(server, args.events or 1_000_000, args.repeats, args.baseline)
        else:
            bench_report(server, args.events or 10_000_000, args.repeats)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        server.stop()
        server.remove()


if __name__ == "__main__":
    main()
