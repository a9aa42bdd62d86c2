"""P10: a store of many runs answers at a glance (run summaries).

Generates (or reuses) an embedded store of ``--runs`` runs holding
``--events`` events in all (default 1,000 runs, 20,000,000 events): each run
is bench_calculator's workload (steps with an overlapped load, a custom event
every 100 steps, a few restarts) at a different start time, ended by a job
end; runs are in groups of 50 (``run_group`` ``g0``, ``g1``...). Then, each
as a real process (``python -m goodput_core.cli``):

* ``runs --summary`` cold (an empty summary cache: every run read once) and
  warm (summaries cached; the store unchanged): wall time and peak RSS;
* ``runs --summary`` after one run got one more event (that run recomputed);
* ``compare --group g3`` (50 runs) warm, text to /dev/null.

    python benchmarks/bench_fleet.py [--runs N] [--events N] [--dir DIR] [--repeats R]

The store is kept in ``--dir`` (default ``/tmp/goodput-fleet``) and reused when
it exists with the same shape; generating 20 M events takes a few minutes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from _machine import machine, median
from bench_calculator import stream
from bench_report import run_cli
from goodput_core.events import EventRecord, Kind
from goodput_core.stores.sqlite import SqliteStore

_BATCH = 10_000


def generate(path: str, runs: int, events: int) -> float:
    """Writes the store; returns the seconds it took."""
    t0 = time.perf_counter()
    store = SqliteStore(path)
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
        if i % 100 == 99:
            print(f"  generated {i + 1} runs", file=sys.stderr, flush=True)
    store.close()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--events", type=int, default=20_000_000)
    ap.add_argument("--dir", default="/tmp/goodput-fleet")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(machine())
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, f"fleet-{args.runs}-{args.events}.sqlite")
    if not os.path.exists(path):
        print(f"generating {args.runs} runs, {args.events:,} events -> {path}", file=sys.stderr)
        print(f"generated in {generate(path, args.runs, args.events):.0f} s")
    url = f"sqlite:///{path}"
    cache = os.path.join(args.dir, "summaries.sqlite")
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
              f"  peak RSS {max(rss):.0f} MiB")

    timed("runs --summary, cold (no cache)", "runs", "--summary", "--store", url,
          fresh_cache=True)
    run_cli("runs", "--summary", "--store", url)  # fill the cache
    timed("runs --summary, warm", "runs", "--summary", "--store", url)
    timed("compare --group g3 (50 runs), warm", "compare", "--group", "g3", "--store", url)
    # one run changes: only it is read again
    store = SqliteStore(path)
    store.append([EventRecord("run-00007", int(Kind.METADATA), 1_700_000_000.0 + 7 * 86_400.0,
                              None, {"note": f"touched {time.time()}"})])
    store.close()
    w, _, r = run_cli("runs", "--summary", "--store", url)
    print(f"{'runs --summary, one run changed (once)':<44} {w:7.2f} s  peak RSS {r:.0f} MiB")


if __name__ == "__main__":
    main()
