"""The cost of many writers (semantics rule 13): one run recorded by several hosts.

Each host records the README loop (a step start, a blocking load's four
events) for ``--steps`` steps, every host's loads a little longer than the
previous host's (so every step has a straggler to carve). Timed, medians over
``--repeats``, in one process run:

* one host's events alone: ``Calculator.add`` + ``cumulative()`` (the
  single-writer path, incremental engine);
* every host's events: the same calls, which choose the lead stream and the
  stragglers' stalls (:mod:`goodput_core.timeline.streams`) and build the job
  timeline from them;
* ``lead_events`` alone (the rule-13 pass).

A calculator that reads a multi-writer run rebuilds the job timeline at each
read with new events, so the second figure is also what each such read costs.

    python benchmarks/bench_many_writers.py [--steps N] [--hosts H] [--repeats R]

``--writers W [W ...]`` times instead a cluster run of ``--events`` events
(:mod:`_cluster_run`: restarts, a disruption the lead borrows, stragglers)
written by each number of writers: ``lead_events`` and the calculator's
rebuild (``ManyWriters.timeline()``: lead stream + timeline), each in a fresh
interpreter, with ``--baseline DIR`` the same with the code in DIR (a
checkout's root) in the same run:

    python benchmarks/bench_many_writers.py --writers 2 8 64 --events 1000000 --baseline DIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _machine import machine, median
from goodput_core.events import EventRecord, Kind
from goodput_core.queries.calculator import Calculator
from goodput_core.timeline.streams import lead_events


def host_events(index: int, steps: int):
    seq = iter(range(1, 10 * steps + 10))
    load = 0.1 + 0.01 * index

    def ev(kind, t, step=None):
        return EventRecord("bench", int(kind), t, step, None, index, f"host{index}",
                           1000 + index, "a", next(seq), t)

    out = [ev(Kind.JOB_START, 0.0)]
    for k in range(steps):
        t = 1.0 + k
        out += [ev(Kind.STEP_START, t, k), ev(Kind.DATA_LOADING_START, t + 0.5),
                ev(Kind.BLOCKING_LOAD_START, t + 0.5), ev(Kind.BLOCKING_LOAD_END, t + 0.5 + load),
                ev(Kind.DATA_LOADING_END, t + 0.5 + load)]
    out.append(ev(Kind.JOB_END, 1.0 + steps))
    return out


def timed(fn, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return median(samples)


_CHILD = """
import json, statistics, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]  # the code measured, then benchmarks/
from _cluster_run import cluster_run
from goodput_core.queries.many_writers import ManyWriters
from goodput_core.timeline.streams import lead_events
events = cluster_run(int(sys.argv[3]), int(sys.argv[4]))
mw = ManyWriters("bench")
mw.extend(events)
out = {"events": len(events), "lead": len(lead_events(events))}
for name, fn in (("lead_events", lambda: lead_events(events)), ("rebuild", mw.timeline)):
    walls = []
    for _ in range(int(sys.argv[5])):
        t = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t)
    out[name] = statistics.median(walls)
print(json.dumps(out))
"""


def bench_writers(writers, events: int, repeats: int, baseline) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    codes = [("this code", os.path.dirname(here))]
    if baseline:
        codes.append(("baseline", os.path.abspath(baseline)))
    print("machine:", machine(), "| load average", os.getloadavg())
    print(f"cluster run of ~{events:,} events, medians of {repeats}")
    for w in writers:
        got = {}
        for label, root in codes:
            out = subprocess.run([sys.executable, "-c", _CHILD, root, here, str(events), str(w),
                                  str(repeats)], capture_output=True, text=True, check=True,
                                 cwd=tempfile.gettempdir())
            got[label] = r = json.loads(out.stdout)
            print(f"  {w:3d} writers, {label:9s}: {r['events']:,} events -> {r['lead']:,} lead; "
                  f"lead_events {r['lead_events']:.3f} s, rebuild {r['rebuild']:.3f} s")
        if baseline:
            a, b = got["baseline"], got["this code"]
            assert a["lead"] == b["lead"], (a, b)
            print(f"  {w:3d} writers: x{a['lead_events'] / b['lead_events']:.2f} lead_events, "
                  f"x{a['rebuild'] / b['rebuild']:.2f} rebuild (baseline / this code)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--writers", type=int, nargs="+", help="time a cluster run instead")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--baseline", metavar="DIR", help="--writers: also time the code in DIR")
    args = ap.parse_args()
    if args.writers:
        bench_writers(args.writers, args.events, args.repeats, args.baseline)
        return
    hosts = [host_events(i, args.steps) for i in range(args.hosts)]
    every = [e for h in hosts for e in h]

    def compute(events):
        calc = Calculator("bench")
        calc.add(events)
        calc.cumulative(now=1e9)

    print("machine:", machine())
    one = timed(lambda: compute(hosts[0]), args.repeats)
    many = timed(lambda: compute(every), args.repeats)
    lead = timed(lambda: lead_events(every), args.repeats)
    print(f"{args.hosts} hosts x {args.steps} steps = {len(every)} events")
    print(f"one host alone ({len(hosts[0])} events): add + cumulative {one:.3f} s")
    print(f"every host: add + cumulative {many:.3f} s ({many / one:.1f}x); "
          f"lead_events alone {lead:.3f} s ({1e6 * lead / len(every):.1f} us per event)")


if __name__ == "__main__":
    main()
