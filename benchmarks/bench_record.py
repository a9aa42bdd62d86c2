"""P1: the cost of one ``record_*`` call on the caller's thread.

Times individual calls with ``time.perf_counter_ns`` (so the figure includes
the timer's own ~50 ns), with the background writer draining into a memory
store as in real use (and then through the default SQLite store, the path
users take), and compares with the reference library's
``GoodputRecorder`` writing to an in-memory fake of its Cloud Logging client
when ml-goodput-measurement is installed.

    python benchmarks/bench_record.py
"""

from __future__ import annotations

import datetime as dt
import gc
import time

import numpy as np

from _machine import machine
from goodput_core import Recorder
from goodput_core.stores.memory import MemoryStore

N = 200_000


def time_calls(call, n=N):
    """Per-call durations in microseconds, one ``perf_counter_ns`` pair per call."""
    out = np.empty(n)
    pc = time.perf_counter_ns
    gc.disable()
    try:
        for i in range(n):
            t0 = pc()
            call(i)
            out[i] = pc() - t0
    finally:
        gc.enable()
    return out / 1000.0


def summarise(name, us):
    print(f"{name:<48} median {np.median(us):6.2f} us   p99 {np.percentile(us, 99):7.2f} us")


class _RefFakeLogger:
    """The reference's cloud_logger contract, kept in memory (no network)."""

    job_name = "bench"

    def __init__(self):
        self.entries = []

    def write_cloud_logging_entry(self, entry):
        # The reference's own _CloudLogger hands the dict to a logging handler
        # whose transport batches in the background; keep the same shape here.
        self.entries.append(entry)


def default_path(n=N // 2):
    """The path users take: ``Recorder(run)`` with the default store (SQLite,
    here a temporary file through GOODPUT_STORE) and the default queue size,
    its writer thread committing to the file while the calls are timed.

    ``n`` calls per measurement, flushed in between, so that the queue (200,000
    by default) never fills: a burst that outruns the writer times the drop
    path instead (dropped events are counted and printed)."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GOODPUT_STORE"] = os.path.join(tmp, "goodput.sqlite")
        rec = Recorder("bench-default")
        rec.record_job_start_time()
        assert rec.flush(60)  # the store is open before the timings
        summarise("ours, default store: record_step_start_time(i)",
                  time_calls(rec.record_step_start_time, n))
        assert rec.flush(120)
        summarise("ours, default store: with rec.step(i)",
                  time_calls(lambda i: rec.step(i).__enter__().__exit__(None, None, None), n))
        assert rec.flush(120)
        print(f"ours, default store: {rec.dropped} events dropped of {3 * n + 1}, "
              f"store {rec.stats().get('store_error') or 'ok'}")
        rec.close()
        del os.environ["GOODPUT_STORE"]


def main():
    print("machine:", machine())
    rec = Recorder("bench", MemoryStore(), queue_size=10 * N)
    summarise("ours: record_step_start_time(i)", time_calls(rec.record_step_start_time))
    summarise("ours: record_data_loading_start_time()",
              time_calls(lambda i: rec.record_data_loading_start_time()))
    summarise("ours: record_custom_badput_event_start_time",
              time_calls(lambda i: rec.record_custom_badput_event_start_time(None, "eval")))
    summarise("ours: with rec.step(i) (start + end)",
              time_calls(lambda i: rec.step(i).__enter__().__exit__(None, None, None)))
    rec.flush(60)
    default_path()
    try:
        from ml_goodput_measurement.src import goodput as ref
    except ImportError:
        print("reference not installed: skipped")
        return
    ref_rec = ref.GoodputRecorder("bench", "log", True, _RefFakeLogger())
    summarise("reference (in-memory logger): record_step_start_time",
              time_calls(ref_rec.record_step_start_time))
    # The reference's real _CloudLogger path: a logging.Logger with a
    # CloudLoggingHandler; model it with a stdlib handler that only queues.
    import logging
    import logging.handlers
    import queue

    q = queue.SimpleQueue()
    log = logging.getLogger("bench.ref.async")
    log.addHandler(logging.handlers.QueueHandler(q))
    log.propagate = False
    log.setLevel(logging.INFO)

    class _AsyncLike(_RefFakeLogger):
        def write_cloud_logging_entry(self, entry):
            log.info(entry)

    ref_rec = ref.GoodputRecorder("bench", "log", True, _AsyncLike())
    summarise("reference (logging-handler path): record_step_start_time",
              time_calls(ref_rec.record_step_start_time))


if __name__ == "__main__":
    main()
