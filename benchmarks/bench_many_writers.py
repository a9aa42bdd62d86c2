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
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
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
