"""``metrics``: record model metrics into the active run (the SDK's functions).

::

    metrics.record(metric_types.MetricType.LOSS, 0.123, step=1)
    metrics.record("custom_metric", 5.0)                     # any name
    metrics.record_metrics([{"metric_name": MetricType.MFU, "value": 41.2}], step=10)

Points go to our recorder's queue (O(1), no I/O on the caller's thread) and
show in ``goodput report`` (latest value), TensorBoard (``metrics/<name>``)
and Prometheus (``goodput_metric{name=...}``) through the monitor.

As the SDK: only process 0 records unless ``record_on_all_hosts=True``; a
list value records its mean; a point recorded before ``machinelearning_run``
is kept and recorded into the next run; the SDK's own ``MetricType``
members are accepted too; system metrics (``MetricType.TPU_DUTY_CYCLE``,
``HOST_CPU_UTILIZATION``...) are dropped unless the run has
``log_system_metrics=True``. Differences: ``labels`` are folded into the
name (``loss{split=eval}``); NaN and infinite values are stored but skipped
by the engine and counted (``skipped.non_finite`` in the report); a value
that is text or a dict (the SDK sends those as log entries) is counted as
``non_numeric`` and not recorded; a bad name or value (None, an empty list)
is counted as ``bad_metric``; a step beyond 64 bits drops that point alone
(``bad_step``). Each is logged once and never raised.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from goodput_core.compat.mldiagnostics import _state

__all__ = ["record", "record_metrics", "stats"]


def record(metric_name: Any, value: Any, step: Optional[int] = None,
           labels: Optional[Dict[str, str]] = None, record_on_all_hosts: bool = False) -> None:
    """Records one metric value in the active run.

    Args:
      metric_name: a :class:`~goodput_core.compat.mldiagnostics.metric_types.MetricType`
        or any string.
      value: a number (or a list: its mean).
      step: the step number (None: no step).
      labels: extra labels (folded into the stored name).
      record_on_all_hosts: record on every process, not only process 0.
    """
    try:
        _state.record_or_keep(metric_name, value, step, labels, record_on_all_hosts)
    except Exception as exc:
        active = _state.current()
        if active is not None and active.strict:
            raise
        _state._warn_once("record", "goodput: metrics.record failed: %s", exc)


def record_metrics(metrics_data: List[Dict[str, Any]], record_on_all_hosts: bool = False,
                   step: Optional[int] = None) -> None:
    """Records several metrics: dicts with ``metric_name``, ``value`` and
    optionally ``step`` and ``labels``; ``step`` applies to those without one."""
    try:
        items = list(metrics_data)
    except TypeError:
        items = [metrics_data]
    for info in items:
        if not isinstance(info, dict):
            record(None, None)  # counted as a bad metric, as any malformed item
            continue
        record(info.get("metric_name"), info.get("value"),
               info["step"] if "step" in info else step,
               info.get("labels"), record_on_all_hosts)


def stats() -> Dict[str, int]:
    """Ours: metrics not recorded, by reason (``bad_metric``, ``non_numeric``,
    ``system_metric``, ``bad_step``, ``dropped_before_run``)."""
    return _state.stats()
