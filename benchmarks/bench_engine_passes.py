"""P11: where the in-memory engine's time goes, next to what reading EventRecords costs at all.

    python benchmarks/bench_engine_passes.py [--events 1000000] [--repeats 9]

On the P2 workload (``bench_calculator.stream``: ``EventRecord`` objects without
writer metadata), medians over the repeats, each after a ``gc.collect()``:

* **the floor**: one C-level pass that reads one field of every record and
  keeps nothing (``deque(map(itemgetter(i), events), maxlen=0)``), for each
  field the engine must read of every record: run, kind, time and, for the
  many-writers check (semantics rule 13), process index, host and pid; plus the
  steps of the step records (``itertools.compress``) and a pass that reads no
  field (``deque(iter(events))``). Their sum is what any engine over these
  objects spends before computing anything;
* **the engine's phases**, the functions ``Calculator.add`` calls, each on the
  whole batch: the run check, the kind, time and step columns
  (``timeline.batch_columns``), routing into the tables, the keyed rows, the
  tables' insert (``timeline.ingest``), the many-writers check
  (``queries.many_writers``);
* **the engine end to end**: a fresh ``Calculator``: ``add`` alone, then ``add``
  + ``cumulative()`` + ``step_stats()``, as ``bench_report.py --p11`` measures it.
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import os
import time
from operator import countOf, itemgetter

from _machine import machine, median
from bench_calculator import RUN, stream

from goodput_core.events import Kind
from goodput_core.queries.calculator import Calculator
from goodput_core.queries.many_writers import _any_writer_field
from goodput_core.timeline import batch_columns
from goodput_core.timeline.ingest import EventTables, _buckets


def _consume(iterable) -> None:
    collections.deque(iterable, maxlen=0)


def floor_passes(events):
    """label -> function: the cheapest passes that read what the engine must read."""
    fields = {"run": 0, "kind": 1, "time": 2, "process index": 5, "host": 6, "pid": 7}
    passes = {"no field (iterate the records)": lambda: _consume(iter(events))}
    for name, i in fields.items():
        passes[f"field {i} ({name})"] = lambda g=itemgetter(i): _consume(map(g, events))
    is_step = bytes(e[1] in (Kind.STEP_START, Kind.STEP_END) for e in events)
    passes["field 3 (step) of the step records"] = lambda: _consume(
        map(itemgetter(3), itertools.compress(events, is_step)))
    return passes


def engine_phases(events):
    """label -> (setup, function): the engine's steps over the batch, in the
    order ``add`` runs them (``setup`` runs untimed before each repeat)."""
    k = batch_columns._kind_column(events)
    t = batch_columns._time_column(events)
    steps = batch_columns._step_columns(events, k)
    state = {}

    def route():
        state["tables"], state["arrays"] = EventTables(), _buckets()
        state["rest"] = state["tables"]._route(k, t, *steps, 0, state["arrays"])

    def keyed():
        state["tables"]._route_keyed(k, t, state["rest"], batch_columns.record_extras(events),
                                     0, state["arrays"])

    def routed():
        route()
        keyed()

    return {
        "run check (countOf)": (None, lambda: countOf(map(itemgetter(0), events), RUN)),
        "kind column": (None, lambda: batch_columns._kind_column(events)),
        "time column": (None, lambda: batch_columns._time_column(events)),
        "step column": (None, lambda: batch_columns._step_columns(events, k)),
        "routing (kind_routes.route_columns)": (None, route),
        "keyed rows": (route, keyed),
        "insert into the tables (_commit)": (
            routed, lambda: state["tables"]._commit(_buckets(), state["arrays"], 0)),
        "many-writers check": (None, lambda: _any_writer_field(events)),
    }


def timed_each(fns, repeats: int):
    """label -> seconds of each repeat, the functions interleaved (a load
    that comes and goes weighs on each alike); ``fns``: label -> (setup, fn)."""
    out = {label: [] for label in fns}
    for _ in range(repeats):
        for label, (setup, fn) in fns.items():
            if setup is not None:
                setup()
            gc.collect()
            t0 = time.perf_counter()
            fn()
            out[label].append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    events = list(stream(args.events))
    now = events[-1].time + 1.0
    print(f"{machine()}; {len(events):,} EventRecords; load average at the start "
          f"{os.getloadavg()[0]:.2f}")
    floor = 0.0
    passes = {label: (None, fn) for label, fn in floor_passes(events).items()}
    for label, times in timed_each(passes, args.repeats).items():
        s = median(times)
        floor += s if label.startswith("field") else 0.0
        print(f"  floor  {s * 1e3:7.2f} ms (min {min(times) * 1e3:6.2f})  {label}")
    print(f"  floor  {floor * 1e3:7.2f} ms  the fields above together")
    spent = 0.0
    for label, times in timed_each(engine_phases(events), args.repeats).items():
        s = median(times)
        spent += s
        print(f"  engine {s * 1e3:7.2f} ms (min {min(times) * 1e3:6.2f})  {label}")
    print(f"  engine {spent * 1e3:7.2f} ms  the phases above together "
          f"({spent / floor:.2f}x the floor)")

    def add_only():
        Calculator(RUN, clock=lambda: now).add(events)

    def end_to_end():
        c = Calculator(RUN, clock=lambda: now)
        c.add(events)
        c.cumulative()
        c.step_stats()

    both = timed_each({"add": (None, add_only), "all": (None, end_to_end)}, args.repeats)
    added, whole = median(both["add"]), median(both["all"])
    print(f"  engine {added * 1e3:7.2f} ms  Calculator.add")
    print(f"  engine {(whole - added) * 1e3:7.2f} ms  cumulative() + step_stats() (the difference)")
    print(f"  engine end to end (add + cumulative + step_stats): {whole:.3f} s, "
          f"{len(events) / whole:,.0f} events/s   [P11 >= 5,000,000]; load average at the end "
          f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
