"""OpenTelemetry exporter: the monitor's figures as OTLP metrics.

The same figures as the Prometheus exporter, named by OpenTelemetry's
conventions (dotted names, UCUM units, namespaced attributes). OpenTelemetry
has no conventions for training jobs yet; these are the ones we propose:

=================================  =====  =========================================
metric                             unit   attributes (besides ``goodput.run``)
=================================  =====  =========================================
``goodput.ratio``                  ``1``  cumulative goodput, 0-1
``goodput.productive.duration``    ``s``
``goodput.badput.duration``        ``s``  ``goodput.bucket`` (partition buckets;
                                          custom types as ``CUSTOM_BADPUT_EVENTS.<T>``)
``goodput.total.duration``         ``s``
``goodput.disruptions``            ``{disruption}``
``goodput.step.max_productive``    ``{step}``
``goodput.step.duration``          ``s``  ``goodput.quantile`` ("0.5", "0.9", "0.99")
``goodput.step.ideal_duration``    ``s``
``goodput.window.ratio``           ``1``  ``goodput.window`` ("3600s")
``goodput.slice.efficiency``       ``1``  ``goodput.efficiency.kind``, ``goodput.window``
``goodput.program.ratio``          ``1``  (MFU)
``goodput.ml_productivity.ratio``  ``1``
``goodput.metric``                        ``goodput.metric.name`` (model metrics)
``goodput.hang.active``            ``1``  1 while a hang is open
``goodput.hang.duration``          ``s``
``goodput.run.stopped``            ``1``  1 while the run is stopped (where the
                                          engine tells a run's state)
``goodput.run.running``            ``1``  1 while the run runs (neither ended nor stopped)
``goodput.checkpoint.interval``    ``s``  ``goodput.interval.kind`` (current, recommended)
``goodput.host.local.duration``    ``s``  ``goodput.process_index`` (top 10 and "median")
``goodput.host.outlier``           ``1``  ``goodput.process_index``, ``goodput.bucket``
``goodput.recorder.dropped_events``       (a counter) events the recorder dropped
``goodput.scheduling.ratio``       ``1``  scheduling goodput (runs with scheduling events)
``goodput.ettr``, ``goodput.mpg``  ``1``  ETTR and ML productivity goodput
``goodput.scheduling.duration``    ``s``  time waiting for resources
``goodput.incidents``                     incidents (disruptions with a restart, and a
                                          stop not restarted)
``goodput.mtbf``, ``goodput.mttr`` ``s``
=================================  =====  =========================================

Every metric is an asynchronous (observable) gauge read from the latest
snapshot of each run, except the dropped-events counter. The resource carries
``service.name`` (``goodput``), ``host.name`` and ``process.pid``;
``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME`` override them.

Reliability: the export runs on the monitor's exporter thread, never the
training thread. One export per snapshot, bounded by the OTLP timeout
(:data:`~goodput_core.exporters.otlp.DEFAULT_TIMEOUT_S` unless set) and by the
snapshot's deadline (at ``stop()``: what is left of the exit budget); a
collector that refuses connections fails the export at once (no retries), one
that is slow or never answers after at most that long
(:mod:`goodput_core.exporters.otlp_guard`), counted in
:attr:`OtelExporter.failed_exports` (and the data points it carried in
:attr:`OtelExporter.dropped_points`), logged once in one line (the SDK's own
lines about it are held back); nothing raises.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple

from goodput_core.exporters import registry
from goodput_core.exporters.base import Exporter, MonitorSnapshot, portable_settings
from goodput_core.exporters.otlp import export_timeout, otlp_exporter, resource
from goodput_core.exporters.otlp_guard import OtlpGuard, quiet_sdk, reason_of
from goodput_core.redact import redact
from goodput_core.exporters.latest import LatestFigures, figures

__all__ = ["OtelExporter", "METRICS"]

logger = logging.getLogger(__name__)
_CLOSE_MS = 500.0  # shutdown waits at most this for an export still under way

#: figure key -> (metric name, unit, attribute names after goodput.run, description)
METRICS: Dict[str, Tuple[str, str, Tuple[str, ...], str]] = {
    "ratio": ("goodput.ratio", "1", (), "Cumulative goodput (0-1)."),
    "prod": ("goodput.productive.duration", "s", (), "Productive time."),
    "bad": ("goodput.badput.duration", "s", ("goodput.bucket",), "Badput by bucket."),
    "total": ("goodput.total.duration", "s", (), "Total measured time."),
    "disr": ("goodput.disruptions", "{disruption}", (), "Restarts of the run."),
    "step": ("goodput.step.max_productive", "{step}", (),
             "The largest step whose progress was kept."),
    "q": ("goodput.step.duration", "s", ("goodput.quantile",), "Step-time quantiles."),
    "ideal": ("goodput.step.ideal_duration", "s", (), "Ideal step time."),
    "win": ("goodput.window.ratio", "1", ("goodput.window",), "Rolling-window goodput (0-1)."),
    "eff": ("goodput.slice.efficiency", "1", ("goodput.efficiency.kind", "goodput.window"),
            "Slice efficiency (0-1): stepping or available."),
    "prog": ("goodput.program.ratio", "1", (),
             "Program goodput: model FLOPs utilisation during productive time (0-1)."),
    "mlp": ("goodput.ml_productivity.ratio", "1", (),
            "ML productivity goodput: runtime x program goodput (0-1)."),
    "metric": ("goodput.metric", "", ("goodput.metric.name",), "Latest model metric value."),
    "hung": ("goodput.hang.active", "1", (), "1 while the run is hung, else 0."),
    "hang": ("goodput.hang.duration", "s", (), "Seconds of every hang so far."),
    "stopped": ("goodput.run.stopped", "1", (), "1 while the run is stopped, else 0."),
    "running": ("goodput.run.running", "1", (), "1 while the run runs (neither ended nor "
                "stopped), else 0."),
    "ckpt": ("goodput.checkpoint.interval", "s", ("goodput.interval.kind",),
             "Checkpoint interval: current and recommended."),
    "host": ("goodput.host.local.duration", "s", ("goodput.process_index",),
             "Host-local badput of the top hosts and the median host."),
    "outlier": ("goodput.host.outlier", "1", ("goodput.process_index", "goodput.bucket"),
                "1 for each outlier host, with its bucket."),
    "sg": ("goodput.scheduling.ratio", "1", (),
           "Scheduling goodput: time holding the resources / time since submission."),
    "ettr": ("goodput.ettr", "1", (), "Effective training-time ratio (productive / wall "
             "clock since submission)."),
    "mpg": ("goodput.mpg", "1", (), "ML productivity goodput: scheduling x runtime x program."),
    "sched": ("goodput.scheduling.duration", "s", (), "Time waiting for resources."),
    "inc": ("goodput.incidents", "{incident}", (), "Incidents: disruptions followed by a "
            "restart, and a stop not restarted (open)."),
    "mtbf": ("goodput.mtbf", "s", (), "Mean time between failures."),
    "mttr": ("goodput.mttr", "s", (), "Mean time from a failure to the next first step."),
    "drop": ("goodput.recorder.dropped_events", "{event}", (),
             "Events the local recorder dropped (queue full)."),
    "stopped_cause": ("goodput.run.stopped.cause", "1", ("goodput.stop.cause",),
                      "1 for why a stopped run stopped."),
    "stopped_at": ("goodput.run.stopped_time", "s", (),
                   "POSIX time at which a stopped run stopped."),
}


class OtelExporter(Exporter):
    """Sends the monitor's figures over OTLP after every snapshot.

    Args:
      endpoint: the collector's base URL (None: ``OTEL_EXPORTER_OTLP_ENDPOINT``,
        else OpenTelemetry's default for the protocol).
      protocol: ``http/protobuf`` or ``grpc`` (None: ``OTEL_EXPORTER_OTLP_PROTOCOL``,
        else ``http/protobuf``).
      headers: extra request headers (None: ``OTEL_EXPORTER_OTLP_HEADERS``).
      timeout_s: each export's deadline, retries included.
      resource_attributes: added to the resource (``OTEL_RESOURCE_ATTRIBUTES`` wins).
      quantiles: the step-time quantiles to send.
      exporter: an OpenTelemetry ``MetricExporter`` to use instead of OTLP (tests,
        or another backend's exporter).

    Raises:
      ValueError: an unsupported protocol, a bad timeout or quantile.
      ImportError: OpenTelemetry is not installed (``pip install 'goodput-core[otel]'``).
    """

    name = "otel"

    def __init__(self, endpoint: Optional[str] = None, *, protocol: Optional[str] = None,
                 headers: Optional[Mapping[str, str]] = None,
                 timeout_s: Optional[float] = None,
                 resource_attributes: Optional[Mapping[str, Any]] = None,
                 quantiles: Sequence[float] = (0.5, 0.9, 0.99), exporter: Any = None):
        if not all(0.0 <= float(q) <= 1.0 for q in quantiles):
            raise ValueError(f"quantiles must be within [0, 1], got {list(quantiles)}")
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader


        self._settings = None if exporter is not None else portable_settings(
            endpoint=endpoint, protocol=protocol, headers=headers, timeout_s=timeout_s,
            resource_attributes=resource_attributes, quantiles=[float(q) for q in quantiles])
        self._exporter = exporter if exporter is not None else otlp_exporter(
            "metrics", endpoint=endpoint, protocol=protocol, headers=headers,
            timeout_s=timeout_s)
        self._timeout_ms = 1000.0 * export_timeout("metrics", timeout_s)
        self._guard = OtlpGuard(self._exporter)  # refused: at once; bounded; one line
        self._latest = LatestFigures(quantiles)
        # A pull reader: we collect once per snapshot and export ourselves, so the
        # result of every export is known (counted drops) and no thread is started.
        self._reader = InMemoryMetricReader()
        self._provider = MeterProvider(resource=resource(resource_attributes),
                                       metric_readers=[self._reader])
        meter = self._provider.get_meter("goodput_core")
        for key, (name, unit, _, doc) in METRICS.items():
            make = meter.create_observable_counter if key == "drop" else \
                meter.create_observable_gauge
            make(name, callbacks=[self._callback(key)], unit=unit, description=doc)
        self.exports = 0
        self.failed_exports = 0
        self.dropped_points = 0
        self._warned = False
        self._closed = False

    def _callback(self, key: str):
        from opentelemetry.metrics import Observation

        attr_names = METRICS[key][2]

        def observe(_options: Any) -> Iterable[Any]:
            out = []
            for run, state in self._latest.runs():
                for k, labels, value in figures(state):
                    if k == key:
                        attrs = {"goodput.run": run, **dict(zip(attr_names, labels))}
                        out.append(Observation(value, attrs))
            return out

        return observe

    def export(self, snapshot: MonitorSnapshot) -> None:
        """Takes the snapshot's figures and sends every run's latest figures."""
        if self._closed:
            return
        self._latest.update(snapshot)
        self._send(snapshot.deadline)

    def _send(self, deadline: Optional[float] = None) -> None:
        from opentelemetry.sdk.metrics.export import MetricExportResult


        data = self._reader.get_metrics_data()
        if data is None:
            return
        points = sum(len(m.data.data_points) for rm in data.resource_metrics
                     for sm in rm.scope_metrics for m in sm.metrics)
        budget = self._guard.budget(self._timeout_ms / 1000.0, deadline)
        reason = self._guard.unreachable(budget)  # refused: not tried, no retries
        if reason is None:
            with quiet_sdk() as heard:  # the SDK's own lines: one of ours instead
                try:
                    result = self._exporter.export(data, timeout_millis=1000.0 * budget)
                    error = None
                except Exception as exc:  # an exporter must never raise into the monitor
                    result, error = None, exc
            if result != MetricExportResult.SUCCESS:
                reason = reason_of(heard, error)
        self.exports += 1
        if reason is not None:
            self.failed_exports += 1
            self.dropped_points += points
            if not self._warned:
                self._warned = True
                logger.warning("goodput: the OpenTelemetry collector did not take the "
                               "metrics (%s); later failures are only counted",
                               redact(reason))

    def process_spec(self) -> Optional[dict]:
        """Rebuilt in a monitor process from the same settings (not with a
        supplied SDK exporter, or settings that are not plain values)."""
        if self._settings is None:
            return None
        return registry.spec("otel", **self._settings)

    def close(self) -> None:
        """Shuts the exporter down (idempotent; no final export: the monitor's
        final cycle already sent the last figures)."""
        if self._closed:
            return
        self._closed = True

        with quiet_sdk():  # (nothing is sent at shutdown: it need not wait long)
            try:
                self._exporter.shutdown(timeout_millis=min(self._timeout_ms, _CLOSE_MS))
            except TypeError:
                self._exporter.shutdown()
            except Exception:  # pragma: no cover - a broken exporter at shutdown
                logger.debug("goodput: OpenTelemetry exporter shutdown failed", exc_info=True)
        try:
            self._provider.shutdown()
        except Exception:  # pragma: no cover
            logger.debug("goodput: OpenTelemetry meter provider shutdown failed",
                         exc_info=True)
