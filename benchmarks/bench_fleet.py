"""P10: a store of many runs answers at a glance (run summaries).

Generates (or reuses) a store of ``--runs`` runs holding ``--events`` events
in all (default 1,000 runs, 20,000,000 events): each run is bench_calculator's
workload (steps with an overlapped load, a custom event every 100 steps, a few
restarts) at a different start time, ended by a job end; runs are in groups of
50 (``run_group`` ``g0``, ``g1``...). Then, each as a real process (``python -m
goodput_core.cli``):

* ``runs --summary`` cold (an empty summary cache: every run read once) and
  warm (summaries cached; the store unchanged): wall time and peak RSS;
* ``compare --group g3`` (50 runs) warm, text to /dev/null;
* ``goodput serve`` (one process; the summary cache warm, as the CLI left it):
  ``GET /api/runs`` first and then warm, ``GET /api/compare?group=g3`` warm; and a
  server started on an empty cache, asked until no row is pending;
* ``runs --summary`` after one run got one more event (that run recomputed).

    python benchmarks/bench_fleet.py [--store sqlite|postgres] [--runs N] [--events N]
                                     [--dir DIR] [--repeats R] [--url URL]

``--store sqlite`` (default): the store is kept in ``--dir`` (default
``/tmp/goodput-fleet``) and reused when it exists with the same shape; generating
20 M events takes a few minutes. ``--store postgres``: a throwaway server
(Debian's ``postgresql``, fsync on, as bench_postgres.py) holds the store for
this run only; PostgreSQL ingests several times slower than SQLite, so give a
smaller ``--events`` on a busy machine and say so with the figures.
``--url postgresql://...`` measures a store generated earlier instead (e.g.
by ``generate`` in a server of your own), so that one 20 M-event store serves
several runs of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

from _machine import machine, median  # noqa: E402
from bench_calculator import stream  # noqa: E402
from bench_report import run_cli  # noqa: E402
from bench_serve import Server, _get  # noqa: E402
from goodput_core.events import EventRecord, Kind  # noqa: E402
from goodput_core.stores import open_store  # noqa: E402

_BATCH = 10_000
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def generate(url: str, runs: int, events: int) -> float:
    """Writes the store at ``url``; returns the seconds it took."""
    t0 = time.perf_counter()
    store = open_store(url)
    flush = getattr(store, "flush", None)  # PostgreSQL writes in the background
    per_run = events // runs
    for i in range(runs):
        name = f"run-{i:05d}"
        shift = i * 86_400.0  # one run a day
        meta = EventRecord(name, int(Kind.METADATA), 1_700_000_000.0 + shift, None,
                           {"run_group": f"g{i // 50}"})
        evs = (e._replace(run=name, time=e.time + shift)
               for e in stream(per_run - 2, restarts=3))
        batch = [meta]
        last = 0.0
        for e in evs:
            batch.append(e)
            last = e.time
            if len(batch) >= _BATCH:
                store.append(batch)
                batch = []
        batch.append(EventRecord(name, int(Kind.JOB_END), last + 1.0))
        store.append(batch)
        if flush is not None and i % 10 == 9:
            assert flush(600)  # the writer's memory buffer stays bounded
        if i % 100 == 99:
            print(f"  generated {i + 1} runs", file=sys.stderr, flush=True)
    if flush is not None:
        assert flush(600)
    store.close()
    return time.perf_counter() - t0


def _pending(url: str) -> int:
    with _OPENER.open(url, timeout=600) as resp:
        return json.loads(resp.read())["pending"]


def serve_figures(url: str, cache: str, repeats: int) -> None:
    """``goodput serve``'s API over the store: the runs list and a group's comparison."""
    server = Server(url)
    try:
        first = _get(server.url + "api/runs")
        assert _pending(server.url + "api/runs") == 0, "the summary cache should be warm"
        warm = [_get(server.url + "api/runs") for _ in range(repeats)]
        compare = [_get(server.url + "api/compare?group=g3") for _ in range(repeats)]
    finally:
        server.stop()
    print(f"{'serve GET /api/runs, first (cache warm)':<44} {first:7.2f} s")
    print(f"{'serve GET /api/runs, warm':<44} median {median(warm):7.3f} s  "
          f"(runs {', '.join(f'{w:.3f}' for w in warm)})")
    print(f"{'serve GET /api/compare?group=g3, warm':<44} median {median(compare):7.2f} s  "
          f"(runs {', '.join(f'{w:.2f}' for w in compare)})")
    os.unlink(cache)
    server = Server(url)
    try:  # an empty cache: the page asks again while rows are pending (2 s each answer)
        t0, asks = time.perf_counter(), 1
        while _pending(server.url + "api/runs"):
            asks += 1
        cold = time.perf_counter() - t0
    finally:
        server.stop()
    print(f"{'serve GET /api/runs, empty cache, all rows':<44} {cold:7.2f} s  ({asks} requests)")


def _store_url(args, server) -> str:
    """The store's URL: a SQLite file in ``--dir`` (generated when missing), or a
    fresh database on the throwaway PostgreSQL ``server``."""
    if server is None:
        path = os.path.join(args.dir, f"fleet-{args.runs}-{args.events}.sqlite")
        url = f"sqlite:///{path}"
        if os.path.exists(path):
            return url
    else:
        server.create_database("fleet")
        url = server.url("fleet")
    print(f"generating {args.runs} runs, {args.events:,} events -> {url.split('@')[-1]}",
          file=sys.stderr)
    print(f"generated in {generate(url, args.runs, args.events):.0f} s")
    return url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--events", type=int, default=20_000_000)
    ap.add_argument("--dir", default="/tmp/goodput-fleet")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--url", default=None, help="measure this existing store (no generation)")
    args = ap.parse_args()
    print(machine(), f"load average {os.getloadavg()[0]:.1f} at the start")
    os.makedirs(args.dir, exist_ok=True)
    if args.url:
        args.store = "postgres" if args.url.startswith("postgres") else "sqlite"
        measure(args, args.url)
    else:
        server = None
        if args.store == "postgres":
            from tests.support.postgres_server import PostgresServer

            server = PostgresServer(fsync=True)
            server.start()
        try:
            measure(args, _store_url(args, server))
        finally:
            if server is not None:
                server.stop()
                server.remove()
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


def measure(args, url: str) -> None:
    cache = os.path.join(args.dir, f"summaries-{args.store}.sqlite")
    os.environ["GOODPUT_SUMMARY_CACHE"] = cache

    def timed(label, *argv, fresh_cache=False):
        walls, rss = [], []
        for _ in range(args.repeats):
            if fresh_cache and os.path.exists(cache):
                os.unlink(cache)
            w, _, r = run_cli(*argv)
            walls.append(w)
            rss.append(r)
        print(f"{label:<44} median {median(walls):7.2f} s  (runs {', '.join(f'{w:.2f}' for w in walls)})"
              f"  peak RSS {max(rss):.0f} MiB", flush=True)

    timed("runs --summary, cold (no cache)", "runs", "--summary", "--store", url,
          fresh_cache=True)
    run_cli("runs", "--summary", "--store", url)  # fill the cache
    timed("runs --summary, warm", "runs", "--summary", "--store", url)
    timed("compare --group g3 (50 runs), warm", "compare", "--group", "g3", "--store", url)
    serve_figures(url, cache, args.repeats)
    run_cli("runs", "--summary", "--store", url)  # the cache again, as before the server
    # one run changes: only it is read again
    store = open_store(url)
    store.append([EventRecord("run-00007", int(Kind.METADATA), 1_700_000_000.0 + 7 * 86_400.0,
                              None, {"note": f"touched {time.time()}"})])
    if hasattr(store, "flush"):
        assert store.flush(60)
    store.close()
    w, _, r = run_cli("runs", "--summary", "--store", url)
    print(f"{'runs --summary, one run changed (once)':<44} {w:7.2f} s  peak RSS {r:.0f} MiB")


if __name__ == "__main__":
    main()
