"""P4: ingest and read rates of the embedded SQLite store (run by hand, not by CI).

Usage::

    python benchmarks/bench_store.py [--events 1000000] [--batch 5000] [--repeats 5]

Each repeat writes ``--events`` events into a fresh temporary file with
``append`` in batches of ``--batch`` (what the recorder's writer thread does),
then reads them all back with one ``read``, in increments of 10,000, as numpy
columns with one ``read_columns`` (what the calculator reads), and once more with the
store's GC pause switched off (to show what it buys). Events are step starts and
step ends from one writer, with a custom badput event (an ``extra`` dict) every
100 steps. Prints the machine and the median (min-max) of each rate.

Targets (docs/quality.md, P4): ingest >= 200,000 events/s, read >= 500,000 events/s.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time

from goodput_core.events import EventRecord, Kind
from goodput_core.stores.sqlite import read as sqlite_store
from goodput_core.stores.sqlite import SqliteStore


class _GcLeftOn:
    """Stands in for the gc module inside the store: reads without the GC pause."""

    isenabled = staticmethod(lambda: True)
    disable = enable = staticmethod(lambda: None)


def make_events(n: int, run: str = "bench") -> list:
    """Builds ``n`` events like a training loop's, with writer metadata filled in."""
    events = []
    host, pid, t, step = platform.node(), os.getpid(), 1.7e9, 0

    def add(kind, step_, extra=None):
        nonlocal t
        events.append(EventRecord(run, int(kind), t, step_, extra, 0, host, pid, "a1",
                                  len(events), t + 0.001))
        t += 0.05

    while len(events) < n:
        add(Kind.STEP_START, step)
        add(Kind.STEP_END, step)
        if step % 100 == 99:
            add(Kind.CUSTOM_BADPUT_START, None, {"custom_badput_event_type": "eval"})
            add(Kind.CUSTOM_BADPUT_END, None, {"custom_badput_event_type": "eval"})
        step += 1
    return events[:n]


def ingest_rate(events: list, batch: int, **options) -> float:
    """Events/s of ``append`` into a fresh file (``options``: SqliteStore's)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(os.path.join(tmp, "bench.sqlite"), **options)
        gc.collect()
        t0 = time.perf_counter()
        for i in range(0, len(events), batch):
            store.append(events[i:i + batch])
        rate = len(events) / (time.perf_counter() - t0)
        store.close()
    return rate


def one_repeat(events: list, batch: int) -> tuple:
    """Returns events/s for: ingest, full read, incremental read, full read with
    GC on, and a full read as numpy columns (what the calculator reads)."""
    n = len(events)
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(os.path.join(tmp, "bench.sqlite"))
        gc.collect()
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            store.append(events[i:i + batch])
        ingest = n / (time.perf_counter() - t0)

        gc.collect()
        t0 = time.perf_counter()
        got, _ = store.read("bench")
        read_all = n / (time.perf_counter() - t0)
        assert len(got) == n and got[-1].seq == n - 1
        assert got[5] == events[5] or math.isnan(got[5].time)
        del got

        gc.collect()
        t0 = time.perf_counter()
        cursor, total = None, 0
        while True:
            part, cursor = store.read("bench", since=cursor, limit=10_000)
            if not part:
                break
            total += len(part)
        read_inc = total / (time.perf_counter() - t0)
        assert total == n

        gc.collect()
        t0 = time.perf_counter()
        page, _ = store.read_columns("bench")
        read_columns = n / (time.perf_counter() - t0)
        assert len(page) == n
        del page

        sqlite_store.gc = _GcLeftOn  # the same full read, measured without the pause
        try:
            gc.collect()
            t0 = time.perf_counter()
            got, _ = store.read("bench")
            read_gc_on = n / (time.perf_counter() - t0)
            del got
        finally:
            sqlite_store.gc = gc
        store.close()
    return ingest, read_all, read_inc, read_gc_on, read_columns


def _fmt(values: list) -> str:
    return (f"{statistics.median(values):>12,.0f} events/s "
            f"(min {min(values):,.0f}, max {max(values):,.0f})")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs; Python {sys.version.split()[0]}; "
          f"SQLite {sqlite3.sqlite_version}")
    print(f"{args.events:,} events, batches of {args.batch:,}, {args.repeats} repeats")
    events = make_events(args.events)
    results, unpacked = [], []
    for _ in range(args.repeats):  # interleaved: both see the same machine load
        results.append(one_repeat(events, args.batch))
        unpacked.append(ingest_rate(events, args.batch, chunk_events=None))
    ingest, read_all, read_inc, read_gc_on, read_cols = (list(col) for col in zip(*results))
    print(f"ingest (append)          : {_fmt(ingest)}   target >= 200,000")
    ratio = statistics.median(a / b for a, b in zip(ingest, unpacked))
    print(f"ingest, rows only        : {_fmt(unpacked)}   packed / rows-only x{ratio:.2f}")
    print(f"read (one call)          : {_fmt(read_all)}   target >= 500,000")
    print(f"read (10,000 per call)   : {_fmt(read_inc)}")
    print(f"read as columns (one call): {_fmt(read_cols)}")
    ratio = statistics.median(a / b for a, b in zip(read_all, read_gc_on))
    print(f"read (one call), GC on   : {_fmt(read_gc_on)}   pause speed-up x{ratio:.2f}")


if __name__ == "__main__":
    main()
