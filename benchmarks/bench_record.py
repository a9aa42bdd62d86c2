"""P1 / P14: the cost of one ``record_*`` call on the caller's thread.

Times individual calls with ``time.perf_counter_ns`` (so the figure includes
the timer's own ~50 ns), with the background writer draining into a memory
store as in real use (no journal: an in-process store), then through the
default SQLite store, the path users take: with the journal on (P14: each
event durable at return, written into the memory-mapped ring before the call
returns) and, in the same run, with ``durable=False`` for the ratio; and
compares with the reference library's ``GoodputRecorder`` writing to an
in-memory fake of its Cloud Logging client when ml-goodput-measurement is
installed.

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


def time_in_blocks(call, flush, n, block=8_000):
    """Per-call durations of ``n`` calls timed in blocks of ``block``, the
    recorder flushed (untimed) between blocks: the writer keeps up, as with a
    training loop (a few events per step), so no call finds the journal's ring
    (16,384 events) full; a burst that outruns the writer times the overflow
    path instead (counted in ``stats()['overflowed']``, printed)."""
    out = []
    for first in range(0, n, block):
        out.append(time_calls(lambda i: call(first + i), min(block, n - first)))
        assert flush(120)
    return np.concatenate(out)


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


def default_path(n=N // 2, durable=True):
    """The path users take: ``Recorder(run)`` with the default store (SQLite,
    here a temporary file through GOODPUT_STORE) and the default queue size,
    its writer thread committing to the file while the calls are timed;
    ``durable``: the journal on (the default) or off.

    ``n`` calls per measurement, in blocks flushed in between
    (:func:`time_in_blocks`)."""
    import os
    import tempfile

    label = "durable" if durable else "durable=False"
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GOODPUT_STORE"] = os.path.join(tmp, "goodput.sqlite")
        os.environ["GOODPUT_SPILL_DIR"] = os.path.join(tmp, "spill")
        rec = Recorder("bench-default", durable=durable)
        assert (rec.stats()["journal"] is not None) == durable
        rec.record_job_start_time()
        assert rec.flush(60)  # the store is open before the timings
        summarise(f"default store, {label}: record_step_start_time(i)",
                  time_in_blocks(rec.record_step_start_time, rec.flush, n))
        summarise(f"default store, {label}: record_data_loading_start_time()",
                  time_in_blocks(lambda i: rec.record_data_loading_start_time(), rec.flush, n))
        summarise(f"default store, {label}: record_custom_badput_event_start_time",
                  time_in_blocks(lambda i: rec.record_custom_badput_event_start_time(None, "eval"),
                                 rec.flush, n))
        summarise(f"default store, {label}: with rec.step(i)",
                  time_in_blocks(lambda i: rec.step(i).__enter__().__exit__(None, None, None),
                                 rec.flush, n, block=4_000))
        stats = rec.stats()
        print(f"default store, {label}: {stats['dropped']} events dropped and "
              f"{stats['overflowed']} waited in memory of {5 * n + 1}, "
              f"store {stats.get('store_error') or 'ok'}")
        rec.close()
        del os.environ["GOODPUT_STORE"], os.environ["GOODPUT_SPILL_DIR"]


def main():
    print("machine:", machine())
    rec = Recorder("bench", MemoryStore(), queue_size=10 * N)  # in-process: no journal
    summarise("ours: record_step_start_time(i)", time_calls(rec.record_step_start_time))
    summarise("ours: record_data_loading_start_time()",
              time_calls(lambda i: rec.record_data_loading_start_time()))
    summarise("ours: record_custom_badput_event_start_time",
              time_calls(lambda i: rec.record_custom_badput_event_start_time(None, "eval")))
    summarise("ours: with rec.step(i) (start + end)",
              time_calls(lambda i: rec.step(i).__enter__().__exit__(None, None, None)))
    rec.flush(60)
    default_path(durable=True)
    default_path(durable=False)
    default_path(durable=True)  # again: the two sides alternate on a noisy machine
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
