"""The cost of the ML-diagnostics interface's ``metrics.record`` on the caller's thread.

Same timing as ``bench_record.py`` (one ``perf_counter_ns`` pair per call,
the background writer draining into a memory store meanwhile). Rows:

* ``rec.record_metric`` - the native call, for reference;
* ``metrics.record(LOSS, v, step=i)`` - a new step each call, so it also
  records that step's start (``steps_from_metrics``);
* ``metrics.record(MFU, v, step=i)`` after LOSS at the same step - no step event;
* ``metrics.record_metrics`` with the SDK README's nine predefined metrics;
* the SDK's own ``metrics.record`` when google-cloud-mldiagnostics is
  installed: without a run (a run needs Google Cloud) it only enqueues, so
  this is its caller-side cost; 9,000 calls keep it under its 10,000-item queue.

    python benchmarks/bench_mldiagnostics.py
"""

from __future__ import annotations

from _machine import machine
from bench_record import N, summarise, time_calls
from goodput_core import Recorder
from goodput_core.compat.mldiagnostics import end_run, machinelearning_run, metrics
from goodput_core.compat.mldiagnostics.metric_types import MetricType
from goodput_core.stores.memory import MemoryStore

NINE = [MetricType.LEARNING_RATE, MetricType.LOSS, MetricType.GRADIENT_NORM,
        MetricType.TOTAL_WEIGHTS, MetricType.STEP_TIME, MetricType.THROUGHPUT,
        MetricType.LATENCY, MetricType.TFLOPS, MetricType.MFU]


def main():
    print("machine:", machine())
    rec = Recorder("bench-native", MemoryStore(), queue_size=10 * N)
    summarise("ours: rec.record_metric('loss', v, step=i)",
              time_calls(lambda i: rec.record_metric("loss", 0.5, step=i)))
    rec.flush(60)
    batch = [{"metric_name": m, "value": 1.0} for m in NINE]
    rows = [
        ("ours: metrics.record(LOSS, v, step=i), new step", N,
         lambda i: metrics.record(MetricType.LOSS, 0.5, step=i)),
        ("ours: metrics.record(MFU, v, step=0), same step", N,
         lambda i: metrics.record(MetricType.MFU, 41.0, step=0)),
        ("ours: metrics.record_metrics(9 metrics, step=i)", N // 10,
         lambda i: metrics.record_metrics(batch, step=i)),
    ]
    for name, n, call in rows:  # a fresh run (recorder, queue) per row, drained after it
        run = machinelearning_run("bench-mld", store=MemoryStore(), process_index=0)
        summarise(name, time_calls(call, n=n))
        assert run.recorder.flush(120)
        stats = run.recorder.stats()
        assert stats["dropped"] == 0 and not stats["rejected"], stats
        end_run()
    try:
        from google_cloud_mldiagnostics import metric_types as sdk_types
        from google_cloud_mldiagnostics import metrics as sdk_metrics
    except ImportError:
        print("google-cloud-mldiagnostics not installed: skipped")
        return
    summarise("SDK: metrics.record(LOSS, v, step=i), enqueue only",
              time_calls(lambda i: sdk_metrics.record(sdk_types.MetricType.LOSS, 0.5, step=i),
                         n=9_000))


if __name__ == "__main__":
    main()
