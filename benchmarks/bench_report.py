"""P8 (and P4 with packed chunks): the commands end to end over large runs.

The workload is bench_calculator's (docs/quality.md's P2 job: steps with an
overlapped load, a custom event every 100 steps, 100 restarts), written into
a fresh embedded store through ``SqliteStore.append`` in batches of 10,000
(the recorder's writer batch), which also measures ingest with the chunk
compaction on. Then each command runs as a real process, as a user runs it
(``python -m goodput_core.cli ...``; bytecode cached, after one warm-up run):

* ``report RUN``: wall time, CPU time and peak RSS (``wait4``, through a small
  launcher: ``_machine.run_measured``), median over
  repeats, next to the engine alone on the same events in memory (a fresh
  ``Calculator``: ``add`` + ``cumulative()`` + ``step_stats()``, in this
  process), so the ratio compares the same events in the same run;
* ``timeline -o .png`` and ``.html``, ``monitor --once``, ``events`` (to
  /dev/null) and ``export``: time and peak RSS;
* the compat ``GoodputCalculator`` over a duck-typed ``cloud_logger`` holding
  the same events as reference payloads: cold ``get_job_goodput(True)``;
* P11, the columnar engine: the same run read from the store as numpy pages
  (``read_columns``, the pages ``goodput report`` reads), held in memory, then
  a fresh ``Calculator`` pulls them (``pull`` + ``cumulative()`` +
  ``step_stats()``): the engine ``report`` runs, without the file reads and
  the process start. Printed as events/s, next to the in-memory engine's
  (``EventRecord`` objects).

The P11 figures (1 M and 10 M events, one line)::

    python benchmarks/bench_report.py --events 1000000 10000000 --repeats 3 --p11

    python benchmarks/bench_report.py [--events N ...] [--repeats R] [--dir DIR]

``--events`` takes several sizes (default 1,000,000). Stores are kept in
``--dir`` (default: a temporary directory) and reused when they exist. To
measure another version on the same workload (before/after), run this script
with ``PYTHONPATH`` pointing at that checkout and another ``--dir``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import subprocess
import sys
import tempfile
import time

from _machine import machine, median, run_measured
from bench_calculator import RUN, stream
import numpy as np

from goodput_core.queries.calculator import Calculator
from goodput_core.queries.run_feed import _PAGE
from goodput_core.stores.columns import EventPage
from goodput_core.stores.sqlite import SqliteStore

_BATCH = 10_000


def build_store(path: str, n: int) -> float:
    """Writes the workload into a fresh store; returns events/s of ``append``."""
    store = SqliteStore(path)
    events = stream(n)
    spent = 0.0
    while True:
        batch = list(itertools.islice(events, _BATCH))
        if not batch:
            break
        t0 = time.perf_counter()
        store.append(batch)
        spent += time.perf_counter() - t0
    store.close()
    return n / spent


def run_cli(*argv: str, stdout=subprocess.DEVNULL):
    """(wall s, CPU s, peak RSS MiB) of one ``goodput`` process."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # users' installs have cached bytecode
    # cwd: not the checkout (``-m`` puts the working directory first on sys.path,
    # which would shadow a PYTHONPATH that points at another checkout to compare)
    wall, code, cpu, rss, err = run_measured(["-m", "goodput_core.cli", *argv], env=env,
                                             stdout=stdout, cwd=tempfile.gettempdir())
    if code != 0:
        raise SystemExit(f"goodput {' '.join(argv)} failed: {err}")
    return wall, cpu, rss


class PageSource:
    """A store stand-in that hands out pages already read (``read_columns``),
    so that ``Calculator.pull`` times the engine alone."""

    def __init__(self, pages):
        self.pages = pages

    def read_columns(self, run, since=None, limit=None):
        i = 0 if since is None else since
        if i >= len(self.pages):
            return EventPage.empty(run), i
        return self.pages[i], i + 1


def columnar_engine(path: str, n: int, repeats: int):
    """Seconds of a fresh Calculator over the run's store pages held in memory
    (and the number of events: the workload's stream stops at a step's end,
    within a few events of ``n``)."""
    store = SqliteStore(path, readonly=True)
    pages, cursor = [], None
    while True:
        page, cursor = store.read_columns(RUN, since=cursor, limit=_PAGE)
        pages.append(page)
        if len(page) < _PAGE:
            break
    store.close()
    now = float(np.nanmax(pages[-1].time)) + 1.0
    times, cpu = [], []
    for _ in range(repeats):
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        calc = Calculator(RUN, clock=lambda: now)
        calc.pull(PageSource(pages))
        calc.cumulative()
        calc.step_stats()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        del calc
    return times, cpu, sum(map(len, pages))


def engine_alone(n: int, repeats: int):
    """Median seconds of the engine on the same events held in memory."""
    events = list(stream(n))
    now = events[-1].time + 1.0
    times, cpu = [], []
    for _ in range(repeats):
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        calc = Calculator(RUN, clock=lambda: now)
        calc.add(events)
        calc.cumulative()
        calc.step_stats()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        del calc
    return times, cpu, events


class ListLogger:
    """A duck-typed ``cloud_logger`` over a payload list (its own reads cost
    nothing, so the figure is the calculator's)."""

    def __init__(self, payloads):
        self.payloads = payloads

    def write_cloud_logging_entry(self, entry):
        self.payloads.append(entry)

    def read_cloud_logging_entries(self, start_time=None, end_time=None, last_entry_info=None):
        first = 0 if last_entry_info is None else int(last_entry_info[1]) + 1
        return self.payloads[first:], (end_time, len(self.payloads) - 1)


def compat_cold(events, repeats: int):
    """Median seconds of a cold compat ``get_job_goodput(True)`` over 1 logger."""
    from goodput_core.compat.goodput import GoodputCalculator
    from goodput_core.events import to_payload

    payloads = [to_payload(e) for e in events]
    logger = ListLogger(payloads)
    now = events[-1].time + 1.0
    times, cpu, goodput = [], [], None
    for _ in range(repeats):
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        calc = GoodputCalculator(RUN, "bench", cloud_logger=logger, clock=lambda: now)
        goodput = calc.get_job_goodput(include_badput_breakdown=True)[0]
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        del calc
    return times, cpu, goodput


def bench_size(n: int, directory: str, repeats: int, engine_max: int, p11: bool) -> None:
    path = os.path.join(directory, f"report-{n}.sqlite")
    if not os.path.exists(path):
        rate = build_store(path, n)
        print(f"[{n:,}] ingest with compaction: {rate:,.0f} events/s   [P4 >= 200,000]")
    size = os.path.getsize(path) / 2 ** 20
    print(f"[{n:,}] store file {size:.0f} MiB ({size * 2 ** 20 / n:.1f} bytes/event)")
    run_cli("report", RUN, "--store", path)  # warm-up: bytecode, page cache
    rep = [run_cli("report", RUN, "--store", path) for _ in range(repeats)]
    wall, cpu, rss = (median([r[i] for r in rep]) for i in range(3))
    print(f"[{n:,}] goodput report: wall {wall:.3f} s (min {min(r[0] for r in rep):.3f}), "
          f"CPU {cpu:.3f} s, peak RSS {rss:.0f} MiB (max {max(r[2] for r in rep):.0f})"
          "   [P11: 1 M <= 0.35 s; 10 M <= 2.5 s, <= 300 MiB]")
    if p11:  # the columnar engine (what report runs), then the in-memory one
        col, col_cpu, read = columnar_engine(path, n, repeats)
        print(f"[{n:,}] columnar engine (store pages in memory): wall {median(col):.3f} s "
              f"(min {min(col):.3f}), CPU {median(col_cpu):.3f} s, "
              f"{read / median(col):,.0f} events/s   [P11 >= 5,000,000]")
        if n <= engine_max:
            eng, eng_cpu, events = engine_alone(n, repeats)
            print(f"[{n:,}] engine alone in memory (EventRecords): wall {median(eng):.3f} s "
                  f"(min {min(eng):.3f}), CPU {median(eng_cpu):.3f} s, "
                  f"{len(events) / median(eng):,.0f} events/s   [P11 >= 5,000,000]; "
                  f"report / columnar engine (wall) {wall / median(col):.2f}")
        return
    with tempfile.TemporaryDirectory() as out:
        for argv in (("timeline", RUN, "--store", path, "-o", os.path.join(out, "t.png")),
                     ("timeline", RUN, "--store", path, "-o", os.path.join(out, "t.html")),
                     ("monitor", RUN, "--store", path, "--once", "--quiet"),
                     ("events", RUN, "--store", path),
                     ("export", RUN, "--store", path, "-o", os.path.join(out, "e.jsonl"),
                      "--page-size", "10000")):
            w, c, r = run_cli(*argv)
            what = argv[0] + (" " + os.path.splitext(argv[-1])[1] if argv[0] == "timeline"
                              else " --once" if argv[0] == "monitor" else "")
            print(f"[{n:,}] goodput {what}: wall {w:.2f} s, CPU {c:.2f} s, peak RSS {r:.0f} MiB")
    # In-memory parts last: a child forked after them would inherit their peak RSS.
    if n <= engine_max:
        eng, eng_cpu, events = engine_alone(n, repeats)
        print(f"[{n:,}] engine alone in memory: wall {median(eng):.3f} s (min {min(eng):.3f}), "
              f"CPU {median(eng_cpu):.3f} s; report / engine: wall {wall / median(eng):.2f}, "
              f"CPU {cpu / median(eng_cpu):.2f}   [P8 <= 2]")
        times, cpu_c, goodput = compat_cold(events, min(repeats, 3))
        print(f"[{n:,}] compat GoodputCalculator over a cloud_logger, cold: wall "
              f"{median(times):.3f} s (min {min(times):.3f}), CPU {median(cpu_c):.3f} s, "
              f"goodput {goodput:.3f} %   [<= 1 s]")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--engine-max", type=int, default=2_000_000,
                    help="largest size for the in-memory engine and compat figures")
    ap.add_argument("--dir", default=None, help="where stores are kept (default: a temp dir)")
    ap.add_argument("--p11", action="store_true",
                    help="only the P11 figures: report, columnar and in-memory engines")
    args = ap.parse_args()
    print(machine(), "load average", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
        for n in args.events:
            bench_size(n, args.dir, args.repeats, args.engine_max, args.p11)
        return
    with tempfile.TemporaryDirectory() as d:
        for n in args.events:
            bench_size(n, d, args.repeats, args.engine_max, args.p11)


if __name__ == "__main__":
    main()
