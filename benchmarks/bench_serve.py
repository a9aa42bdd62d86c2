"""P12: ``goodput serve`` over a 1,000,000-event run.

The workload is bench_calculator's (quality.md's P2 job: steps with an
overlapped load, a custom event every 100 steps, 100 restarts), in a fresh
embedded store (bench_report's ``build_store``). The dashboard runs as a
real process (``python -m goodput_core.cli serve``) and is asked over HTTP
what the run page asks:

* **first read**: ``GET /api/runs/RUN/report`` on a cold server (reads the
  run from the store and computes the report);
* **page usable after the first read**: the run page's other requests
  (``series?points=120``, ``timeline?width=1200``), then the report again,
  each timed; their sum is what the page waits for after the first read
  (the P12 target: <= 1 s);
* **timeline cost by width**: ``timeline?width=W`` zoomed on a different
  stretch each time (no cache hit in the merge) for W in 100 .. 4000, on
  this run and on one 10x smaller: the cost follows the width, not the events;
* **live**: the time from an append to the store to the ``change`` event on
  the run's live stream (what makes an open page fetch again);
* **memory**: the server's RSS after the first read, and after 100 .. 900
  more requests (zooms, series, reports): bounded, not growing per request.

    python benchmarks/bench_serve.py [--events N] [--repeats R] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

from _machine import machine, median
from bench_calculator import RUN
from bench_report import build_store

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str) -> float:
    t0 = time.perf_counter()
    with _OPENER.open(url, timeout=600) as resp:
        json.loads(resp.read())
    return time.perf_counter() - t0


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kb = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    return kb / 1024


class Server:
    """A ``goodput serve`` process over a SQLite file (a path) or a store URL."""

    def __init__(self, path: str):
        store = path if "://" in path else f"sqlite:///{path}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "goodput_core.cli", "serve", "--store", store,
             "--port", "0"], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline()
        self.url = re.search(r"on (http://\S+/)", line).group(1)
        self.base = f"{self.url}api/runs/{RUN}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def page_after_first_read(path: str) -> dict:
    srv = Server(path)
    try:
        baseline = _rss_mib(srv.proc.pid)
        first = _get(f"{srv.base}/report")
        steps = {"series": _get(f"{srv.base}/series?points=120"),
                 "timeline": _get(f"{srv.base}/timeline?width=1200"),
                 "report": _get(f"{srv.base}/report")}
        rss_read = _rss_mib(srv.proc.pid)
        return {"first": first, "steps": steps, "usable": sum(steps.values()),
                "rss_start": baseline, "rss_read": rss_read}
    finally:
        srv.stop()


def timeline_costs(path: str, widths, repeats: int) -> dict:
    srv = Server(path)
    try:
        _get(f"{srv.base}/timeline?width=10")  # the first read and the span index
        life = json.loads(_OPENER.open(f"{srv.base}/timeline?width=1").read())
        a, b = life["start"], life["end"]
        out = {}
        for w in widths:
            times = []
            for i in range(repeats):  # a different zoom each time
                lo = a + (b - a) * (i % 10) / 20
                hi = lo + (b - a) / 2
                times.append(_get(f"{srv.base}/timeline?width={w}&start={lo}&end={hi}"))
            out[w] = median(times)
        return out
    finally:
        srv.stop()


def memory_after_requests(path: str, counts) -> list:
    """RSS after the first read, then after each count of further requests."""
    srv = Server(path)
    try:
        _get(f"{srv.base}/report")
        out = [_rss_mib(srv.proc.pid)]
        a = json.loads(_OPENER.open(f"{srv.base}/timeline?width=1").read())["start"]
        for i in range(max(counts)):
            if i in counts:
                out.append(_rss_mib(srv.proc.pid))
            kind = i % 3
            if kind == 0:
                _get(f"{srv.base}/timeline?width=1500&start={a + i}&end={a + 1000 + 37 * i}")
            elif kind == 1:
                _get(f"{srv.base}/series?points=200&window={60 + i}")
            else:
                _get(f"{srv.base}/report")
        out.append(_rss_mib(srv.proc.pid))
        return out
    finally:
        srv.stop()


def live_latency(path: str, repeats: int) -> list:
    """Seconds from each append (a batch of new steps) to the stream's ``change``."""
    from goodput_core.events import EventRecord, Kind
    from goodput_core.stores.sqlite import SqliteStore

    srv = Server(path)
    store = SqliteStore(path)
    try:
        _get(f"{srv.base}/report")
        stream = _OPENER.open(f"{srv.url}api/stream?run={RUN}", timeout=60)
        assert stream.readline() == b"retry: 1000\n"
        stream.readline()
        out = []
        for i in range(repeats):
            t = 4e9 + i  # far after the run: new events, whatever the workload's times
            t0 = time.perf_counter()
            store.append([EventRecord(RUN, int(Kind.METRIC), t, None,
                                      {"metric_name": "bench", "metric_value": float(i)})])
            while stream.readline() != b"event: change\n":
                pass
            out.append(time.perf_counter() - t0)
            stream.readline(), stream.readline()  # the data line and the blank line
        stream.close()
        return out
    finally:
        store.close()
        srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    folder = args.dir or tempfile.mkdtemp(prefix="bench-serve-")
    sizes = [args.events // 10, args.events]
    paths = {}
    for n in sizes:
        paths[n] = os.path.join(folder, f"serve-{n}.sqlite")
        if not os.path.exists(paths[n]):
            build_store(paths[n], n)
    print(f"# {machine()}; load average {os.getloadavg()}")
    runs = [page_after_first_read(paths[args.events]) for _ in range(args.repeats)]
    print(f"{args.events:,} events: first read (cold report) median "
          f"{median([r['first'] for r in runs]):.3f} s")
    for k in ("series", "timeline", "report"):
        print(f"  then {k:<9} median {median([r['steps'][k] for r in runs]) * 1000:7.1f} ms")
    print(f"  page usable after the first read: median {median([r['usable'] for r in runs]):.3f} s"
          f" (target <= 1 s)")
    print(f"  server RSS: {median([r['rss_start'] for r in runs]):.0f} MiB started, "
          f"{median([r['rss_read'] for r in runs]):.0f} MiB after the read")
    widths = (100, 400, 1000, 4000)
    for n in sizes:
        costs = timeline_costs(paths[n], widths, args.repeats * 4)
        print(f"timeline request, {n:,} events: " + ", ".join(
            f"width {w}: {c * 1000:.1f} ms" for w, c in costs.items()))
    live = live_latency(paths[args.events], 10)
    print(f"live: append -> change event median {median(live) * 1000:.0f} ms, "
          f"max {max(live) * 1000:.0f} ms (target: within 2 s)")
    counts = (100, 300, 600, 900)
    rss = memory_after_requests(paths[args.events], set(counts[:-1]) | {counts[-1]})
    print(f"server RSS: {rss[0]:.0f} MiB after the first read; after "
          + ", ".join(f"{n} requests {m:.0f} MiB" for n, m in zip(counts, rss[1:])))
    print(f"# load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
