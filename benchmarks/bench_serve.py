"""P12: ``goodput serve`` over a 1,000,000-event run.

The workload is bench_calculator's (docs/quality.md's P2 job: steps with an
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
  more requests (zooms, series, reports): bounded, not growing per request;
* **a crowd**: 200 clients connect at once, then each asks for the runs list:
  the time until every one is answered.

``--against DIR`` runs every measurement also with the ``goodput_core`` of
another checkout (``git worktree add DIR main``, or ``git archive main | tar
-x -C DIR``), the two taking turns, and prints both with their ratio.

    python benchmarks/bench_serve.py [--events N] [--repeats R] [--dir DIR] [--against DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import socket
import time
import urllib.request
from typing import Optional

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
    """A ``goodput serve`` process over a SQLite file (a path) or a store URL;
    ``code``: the checkout whose ``goodput_core`` it runs (None: this one)."""

    def __init__(self, path: str, code: Optional[str] = None):
        store = path if "://" in path else f"sqlite:///{path}"
        env = dict(os.environ)
        if code is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [code, env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "goodput_core.cli", "serve", "--store", store,
             "--port", "0"], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
            env=env)
        line = self.proc.stdout.readline()
        self.url = re.search(r"on (http://\S+/)", line).group(1)
        self.base = f"{self.url}api/runs/{RUN}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def page_after_first_read(path: str, code: Optional[str] = None) -> dict:
    srv = Server(path, code)
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


def timeline_costs(path: str, widths, repeats: int, sides: dict) -> dict:
    """Median seconds of a zoomed timeline request by width, for each side; the
    sides' servers run at once and take turns request by request."""
    servers = {name: Server(path, code) for name, code in sides.items()}
    try:
        spans = {}
        for name, srv in servers.items():
            _get(f"{srv.base}/timeline?width=10")  # the first read and the span index
            life = json.loads(_OPENER.open(f"{srv.base}/timeline?width=1").read())
            spans[name] = (life["start"], life["end"])
        out: dict = {name: {} for name in servers}
        for w in widths:
            times: dict = {name: [] for name in servers}
            for i in range(repeats):  # a different zoom each time
                for name, srv in servers.items():
                    a, b = spans[name]
                    lo = a + (b - a) * (i % 10) / 20
                    hi = lo + (b - a) / 2
                    times[name].append(
                        _get(f"{srv.base}/timeline?width={w}&start={lo}&end={hi}"))
            for name in servers:
                out[name][w] = median(times[name])
        return out
    finally:
        for srv in servers.values():
            srv.stop()


def memory_after_requests(path: str, counts, code: Optional[str] = None) -> list:
    """RSS after the first read, then after each count of further requests."""
    srv = Server(path, code)
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


def live_latency(path: str, repeats: int, code: Optional[str] = None) -> list:
    """Seconds from each append (a batch of new steps) to the stream's ``change``."""
    from goodput_core.events import EventRecord, Kind
    from goodput_core.stores.sqlite import SqliteStore

    srv = Server(path, code)
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


def crowd(path: str, clients: int = 200, code: Optional[str] = None) -> float:
    """Seconds from 200 clients connecting at once to the last of them answered
    (``GET /api/runs``, each on its own connection)."""
    srv = Server(path, code)
    try:
        _get(f"{srv.url}api/runs")  # the runs list read once: the cost is the server's
        host, port = srv.url[len("http://"):].rstrip("/").rsplit(":", 1)
        request = f"GET /api/runs HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
        t0 = time.perf_counter()
        conns = [socket.create_connection((host, int(port)), timeout=120) for _ in range(clients)]
        for c in conns:
            c.sendall(request.encode())
        for c in conns:
            while c.recv(65536):
                pass
            c.close()
        return time.perf_counter() - t0
    finally:
        srv.stop()


def _both(sides: dict, measure, *args) -> dict:
    """``measure(*args, code=...)`` for each side, the sides taking turns."""
    return {name: measure(*args, code=code) for name, code in sides.items()}


def _cmp(values: dict, fmt) -> str:
    """One figure per side, then this side's ratio to the other."""
    text = ", ".join(f"{name} {fmt(v)}" for name, v in values.items())
    if len(values) == 2:
        a, b = values.values()
        text += f" (ratio {a / b:.2f})" if b else ""
    return text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--against", default=None, metavar="DIR",
                    help="also measure the goodput_core of this checkout (e.g. main)")
    args = ap.parse_args()
    folder = args.dir or tempfile.mkdtemp(prefix="bench-serve-")
    sizes = [args.events // 10, args.events]
    paths = {}
    for n in sizes:
        paths[n] = os.path.join(folder, f"serve-{n}.sqlite")
        if not os.path.exists(paths[n]):
            build_store(paths[n], n)
    sides = {"this": None}
    if args.against:
        sides["against"] = os.path.abspath(args.against)
    print(f"# {machine()}; load average {os.getloadavg()}; sides {sides}")
    runs = {name: [] for name in sides}
    for _ in range(args.repeats):  # the sides take turns: the load hits both alike
        for name, r in _both(sides, page_after_first_read, paths[args.events]).items():
            runs[name].append(r)
    med = lambda f: {k: median([f(r) for r in v]) for k, v in runs.items()}  # noqa: E731
    print(f"{args.events:,} events: first read (cold report) median "
          + _cmp(med(lambda r: r["first"]), lambda v: f"{v:.3f} s"))
    for k in ("series", "timeline", "report"):
        print(f"  then {k:<9} median "
              + _cmp(med(lambda r: r["steps"][k]), lambda v: f"{v * 1000:.1f} ms"))
    print("  page usable after the first read: median "
          + _cmp(med(lambda r: r["usable"]), lambda v: f"{v:.3f} s") + " (target <= 1 s)")
    print("  server RSS started: " + _cmp(med(lambda r: r["rss_start"]), lambda v: f"{v:.0f} MiB")
          + "; after the read: " + _cmp(med(lambda r: r["rss_read"]), lambda v: f"{v:.0f} MiB"))
    widths = (100, 400, 1000, 4000)
    for n in sizes:
        costs = timeline_costs(paths[n], widths, args.repeats * 4, sides)
        for name, c in costs.items():
            print(f"timeline request, {n:,} events, {name}: " + ", ".join(
                f"width {w}: {t * 1000:.1f} ms" for w, t in c.items()))
    live = _both(sides, live_latency, paths[args.events], 10)
    print("live: append -> change event median "
          + _cmp({k: median(v) for k, v in live.items()}, lambda v: f"{v * 1000:.0f} ms")
          + "; max " + _cmp({k: max(v) for k, v in live.items()}, lambda v: f"{v * 1000:.0f} ms")
          + " (target: within 2 s)")
    counts = (100, 300, 600, 900)
    for name, rss in _both(sides, memory_after_requests, paths[args.events],
                           set(counts[:-1]) | {counts[-1]}).items():
        print(f"server RSS, {name}: {rss[0]:.0f} MiB after the first read; after "
              + ", ".join(f"{n} requests {m:.0f} MiB" for n, m in zip(counts, rss[1:])))
    crowds = {name: [] for name in sides}
    for _ in range(args.repeats):
        for name, t in _both(sides, crowd, paths[sizes[0]]).items():
            crowds[name].append(t)
    print("200 clients connecting at once, all answered: median "
          + _cmp({k: median(v) for k, v in crowds.items()}, lambda v: f"{v:.2f} s"))
    print(f"# load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
