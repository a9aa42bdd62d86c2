"""P2, P3, P7: the calculator's cold computation, incremental update and memory.

The workload is docs/quality.md's: 1,000,000 events of a job whose steps each
overlap one data load, with a custom (evaluation) event every 100 steps and
100 restarts (each a crash, a new job start, init, preparation, a sync load
and the steps again from the last checkpoint). Events are EventRecords as a
store returns them.

* P2: a fresh Calculator takes all events and answers ``cumulative()``
  (median wall time over repeats; extra peak memory by tracemalloc, which
  sees numpy's buffers, in a separate run so that tracing does not slow the
  timed ones).
* P3: on top of those 1,000,000 events, 1,000 more arrive (the job goes on):
  ``add`` + ``cumulative()``; median over 50 increments.
* P7: bytes held by the timeline's arrays per recorded step, and
  tracemalloc's count of what the calculator holds after the computation.

    python benchmarks/bench_calculator.py [--events N] [--repeats R] [--no-reference]

With ml-goodput-measurement installed, the same workload (as payloads) is also
run through the reference's GoodputCalculator, in the same process run, over
an in-memory fake of its Cloud Logging reader (tests/support/reference_harness),
and the ratios are printed.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

from _machine import machine, median
from goodput_core.queries.calculator import Calculator
from goodput_core.events import EventRecord, Kind

RUN = "bench"
CUSTOM = {"custom_badput_event_type": "eval"}


def workload(n_events: int, restarts: int = 100, tail: int = 0):
    """The P2 event stream, plus ``tail`` events of the job going on after it.

    Returns:
      (events, extra_events): two lists of EventRecords in write order.
    """
    out = list(stream(n_events, restarts, tail))
    return out[:n_events], out[n_events:n_events + tail]


def stream(n_events: int, restarts: int = 100, tail: int = 0):
    """Yields the events of :func:`workload` one by one (``n_events + tail``
    of them), so that a large run can be written without holding it."""
    per_step = 3 + 2 / 100
    steps_per_attempt = int((n_events - 8 * (restarts + 1)) / per_step) // (restarts + 1)
    t, step, ckpt, count = 1_700_000_000.0, 0, 0, 0
    start, stop = int(Kind.CUSTOM_BADPUT_START), int(Kind.CUSTOM_BADPUT_END)
    step_k, dl0, dl1 = int(Kind.STEP_START), int(Kind.DATA_LOADING_START), int(Kind.DATA_LOADING_END)
    total = n_events + tail
    for attempt in range(restarts + 1):
        for kind, dt in ((Kind.JOB_START, 0.0), (Kind.TPU_INIT_START, 0.0),
                         (Kind.TPU_INIT_END, 20.0), (Kind.TRAINING_PREP_START, 20.0),
                         (Kind.TRAINING_PREP_END, 30.0), (Kind.DATA_LOADING_START, 30.0),
                         (Kind.DATA_LOADING_END, 31.0)):
            yield EventRecord(RUN, int(kind), t + dt)
        count += 7
        t += 31.0
        n = steps_per_attempt if attempt < restarts else 10 ** 12
        for _ in range(n):
            if attempt == restarts and count >= total:
                return
            yield EventRecord(RUN, step_k, t, step)
            yield EventRecord(RUN, dl0, t + 0.05)
            yield EventRecord(RUN, dl1, t + 0.25)
            count += 3
            if step % 100 == 0:
                yield EventRecord(RUN, start, t + 0.5, None, CUSTOM)
                yield EventRecord(RUN, stop, t + 2.5, None, CUSTOM)
                count += 2
                ckpt = step
                t += 2.0
            t += 1.0
            step += 1
        if attempt < restarts:
            yield EventRecord(RUN, int(Kind.DISRUPTION), t + 0.5, None,
                              {"disruption_cause": "preemption"})
            count += 1
            t += 60.0
            step = ckpt + 1


def cold(events):
    calc = Calculator(RUN, clock=lambda: events[-1].time + 1.0)
    calc.add(events)
    return calc, calc.cumulative()


def bench_p2(events, repeats):
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        calc, result = cold(events)
        times.append(time.perf_counter() - t0)
        del calc
    gc.collect()
    tracemalloc.start()
    calc, result = cold(events)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return times, peak, held, calc, result


def bench_p3(calc, extra, batch=1000):
    times = []
    for i in range(0, len(extra) - batch + 1, batch):
        chunk = extra[i:i + batch]
        t0 = time.perf_counter()
        calc.add(chunk)
        calc.cumulative(now=chunk[-1].time + 1.0)
        times.append(time.perf_counter() - t0)
    return times


def reference_side(events, extra, increments=3, batch=1000):
    """Times the reference on the same workload: cold, memory, and updates.

    Returns:
      (cold seconds, peak MiB, held bytes, [update seconds], reference goodput %)
    """
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from goodput_core.events import to_payload
    from tests.support import reference_harness as h

    payloads = [to_payload(e) for e in events]
    now = [events[-1].time + 1.0]
    fake = h.FakeCloudLogger(RUN, clock=lambda: now[0], retention=None)
    for p in payloads:
        fake.append(p)

    def fresh(cache_dir):
        return h._ref_goodput.GoodputCalculator(RUN, "bench", cloud_logger=fake,
                                                cache_dir=cache_dir)

    import tempfile

    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        with h.frozen_reference_clock(now[0]):
            gc.collect()
            t0 = time.perf_counter()
            calc = fresh(d1)
            goodput, _, _ = calc.get_job_goodput(include_badput_breakdown=True)
            cold_s = time.perf_counter() - t0
            gc.collect()
            tracemalloc.start()
            calc2 = fresh(d2)
            calc2.get_job_goodput(include_badput_breakdown=True)
            held, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            del calc2
        updates = []
        for i in range(increments):
            chunk = extra[i * batch:(i + 1) * batch]
            for e in chunk:
                fake.append(to_payload(e))
            now[0] = chunk[-1].time + 1.0
            with h.frozen_reference_clock(now[0]):
                t0 = time.perf_counter()
                calc.get_job_goodput(include_badput_breakdown=True)
                updates.append(time.perf_counter() - t0)
    return cold_s, peak / 2 ** 20, held, updates, goodput


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--increments", type=int, default=50)
    ap.add_argument("--no-reference", action="store_true", help="skip the reference side")
    args = ap.parse_args()
    print(machine())
    events, extra = workload(args.events, tail=1000 * args.increments)
    print(f"workload: {len(events):,} events (+{len(extra):,} for P3)")

    times, peak, held, calc, result = bench_p2(events, args.repeats)
    print(f"P2 cold add + cumulative: median {median(times):.3f} s over {len(times)} runs "
          f"(min {min(times):.3f}, max {max(times):.3f}); extra peak memory "
          f"{peak / 2 ** 20:.1f} MiB   [target <= 1 s, <= 300 MiB]")
    print(f"   goodput {result.goodput:.3f} %, disruptions {result.disruptions}, "
          f"skipped {result.skipped}")

    inc = bench_p3(calc, extra)
    inc_ms = [x * 1e3 for x in inc]
    print(f"P3 add 1,000 events + cumulative: median {median(inc_ms):.2f} ms over {len(inc)} "
          f"updates (max {max(inc_ms):.2f} ms)   [target <= 10 ms]")

    tl = calc.timeline
    steps = len(tl.tables["step_start"])
    print(f"P7 arrays held: {tl.nbytes / steps:.1f} bytes per step ({tl.nbytes / 2 ** 20:.1f} MiB "
          f"for {steps:,} recorded steps); tracemalloc after P2: {held / steps:.1f} bytes "
          f"per step   [target <= 100]")



    if args.no_reference:
        return
    try:
        import ml_goodput_measurement  # noqa: F401
    except ImportError:
        print("reference not installed: no side-by-side figures")
        return
    ref_cold, ref_peak, ref_held, ref_updates, ref_goodput = reference_side(events, extra)
    print(f"reference cold get_job_goodput: {ref_cold:.2f} s ({ref_cold / median(times):.0f}x ours); "
          f"extra peak memory {ref_peak:.0f} MiB ({ref_peak * 2 ** 20 / peak:.1f}x ours); "
          f"goodput {ref_goodput:.3f} % (ours {result.goodput:.3f} %)")
    print(f"reference update after 1,000 events: median {median(ref_updates):.2f} s over "
          f"{len(ref_updates)} ({median(ref_updates) / median(inc):.0f}x ours)")
    print(f"reference memory held after the computation: {ref_held / steps:.0f} bytes per step "
          f"({ref_held / held:.1f}x ours)")


if __name__ == "__main__":
    main()
