"""The ML-diagnostics SDK's interface (``google-cloud-mldiagnostics``) on our engine.

Code written for the SDK changes its import line and runs, with no Google
Cloud account::

    # from google_cloud_mldiagnostics import machinelearning_run, metrics, xprof, metric_types
    from goodput_core.compat.mldiagnostics import machinelearning_run, metrics, xprof, metric_types

    run = machinelearning_run(name="exp-1", run_group="slice-sweep", configs=yaml_dict,
                              gcs_path="gs://bucket", on_demand_xprof=True)
    metrics.record(metric_types.MetricType.LOSS, 0.123, step=1)
    with xprof():
        train()

The layout mirrors the SDK's package: ``machinelearning_run`` (a function),
``metrics`` (a module: ``record``, ``record_metrics``), ``xprof`` (the
profiler class), ``metric_types`` (a module: ``MetricType``),
``custom_types`` (``mlrun_types``: ``Framework``, ``RunPhase``... and
``MLRun``; ``metric_types``; ``exceptions``) and ``core.xprof``
(``start_on_demand_xprof``, ``stop_on_demand_xprof``). The run, its metrics and configs go to our recorder and
store (``goodput report``, ``goodput compare``, TensorBoard, Prometheus and
the timeline show them); profiles go to a local directory, and to
``gs://`` when google-cloud-storage is installed. See ``mlrun``,
``metrics`` and ``_xprof`` for what differs from the SDK.

Importing this package imports no ML framework: jax is imported only when
a profile session (or the on-demand server) starts.
"""

from goodput_core.compat.mldiagnostics import core, custom_types, exceptions, metric_types, metrics
from goodput_core.compat.mldiagnostics._xprof import Xprof
from goodput_core.compat.mldiagnostics.mlrun import (
    MLRun,
    active_run,
    end_run,
    machinelearning_run,
)

xprof = Xprof

__all__ = ["machinelearning_run", "metrics", "xprof", "metric_types", "exceptions", "MLRun",
           "Xprof", "active_run", "end_run", "core", "custom_types"]
