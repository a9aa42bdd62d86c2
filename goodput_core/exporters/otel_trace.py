"""A run's timeline as an OpenTelemetry trace, sent over OTLP.

:func:`export_run` sends a whole run (``goodput export RUN --format otlp``);
:class:`OtelTraceExporter` is the monitor's exporter that sends phases as they
end. The spans come from :mod:`goodput_core.queries.run_trace`: one trace per
run, a span per attempt, a child span per phase (productive stretches
aggregated with their step range), disruptions and restarts as span events.
Their ids are derived from the run, so sending a run again (or the monitor,
then the command) repeats the same ids instead of adding a second trace.

Attributes: ``goodput.run``, ``goodput.attempt``, ``goodput.bucket`` (the
category: ``PRODUCTIVE``, a badput bucket, ``CUSTOM_BADPUT_EVENTS:<TYPE>``),
``goodput.step.first`` / ``goodput.step.last`` (productive stretches),
``goodput.open`` (a span still going on when it was sent); span events
``disruption`` (``goodput.disruption.cause``) and ``restart`` (``goodput.step``).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, List, Mapping, Optional, Set

from goodput_core.exporters import registry
from goodput_core.exporters.base import Exporter, MonitorSnapshot, portable_settings
from goodput_core.exporters.otlp import otlp_exporter, resource
from goodput_core.exporters.otlp_guard import PROBE_TIMEOUT_S, OtlpGuard, quiet_sdk
from goodput_core.queries.run_trace import TraceSpan, attempt_spans, phase_spans, trace_id

__all__ = ["OtelTraceExporter", "export_run", "to_readable_spans", "BATCH"]

logger = logging.getLogger(__name__)

#: Spans per OTLP request.
BATCH = 512


def _ns(t: float) -> int:
    return int(round(t * 1e9))


def to_readable_spans(run: str, spans: Iterable[TraceSpan], resource: Any) -> List[Any]:
    """OpenTelemetry SDK ``ReadableSpan`` objects for ``spans`` of ``run``."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

    tid = trace_id(run)
    scope = InstrumentationScope("goodput_core")
    flags = TraceFlags(TraceFlags.SAMPLED)
    out = []
    for sp in spans:
        ctx = SpanContext(tid, sp.span_id, is_remote=False, trace_flags=flags)
        parent = (None if sp.parent_id is None
                  else SpanContext(tid, sp.parent_id, is_remote=False, trace_flags=flags))
        attrs = dict(sp.attributes)
        if not sp.closed:
            attrs["goodput.open"] = True
        events = tuple(Event(ev.name, dict(ev.attributes), _ns(ev.t)) for ev in sp.events)
        out.append(ReadableSpan(name=sp.name, context=ctx, parent=parent, resource=resource,
                                attributes=attrs, events=events, kind=SpanKind.INTERNAL,
                                start_time=_ns(sp.start), end_time=_ns(sp.end),
                                instrumentation_scope=scope))
    return out


def _send(exporter: Any, spans: List[Any], guard: Any = None) -> int:
    """Sends ``spans`` in batches; returns how many the collector refused (all
    of them, untried, when ``guard`` finds it refusing connections)."""
    from opentelemetry.sdk.trace.export import SpanExportResult


    if guard is not None and guard.unreachable(PROBE_TIMEOUT_S) is not None:
        return len(spans)  # refused: no send, no retries until the timeout
    failed = 0
    for i in range(0, len(spans), BATCH):
        batch = spans[i:i + BATCH]
        with quiet_sdk():  # the SDK's own lines about it: one of ours instead
            try:
                ok = exporter.export(batch) == SpanExportResult.SUCCESS
            except Exception:  # noqa: BLE001 - counted; never raised into the caller's loop
                logger.debug("goodput: span export raised", exc_info=True)
                ok = False
        if not ok:
            failed += len(batch)
    return failed


def _span_exporter(endpoint: Optional[str], protocol: Optional[str],
                   headers: Optional[Mapping[str, str]], timeout_s: Optional[float]) -> Any:

    return otlp_exporter("traces", endpoint=endpoint, protocol=protocol, headers=headers,
                         timeout_s=timeout_s)


def export_run(calc: Any, now: float, *, endpoint: Optional[str] = None,
               protocol: Optional[str] = None, headers: Optional[Mapping[str, str]] = None,
               timeout_s: Optional[float] = None, exporter: Any = None,
               resource_attributes: Optional[Mapping[str, Any]] = None) -> dict:
    """Sends ``calc``'s whole run as one trace.

    Returns:
      ``{"spans": sent, "failed": refused or lost, "attempts": n, "phases": n}``.

    Raises:
      ValueError: an unsupported protocol or a bad timeout.
      ImportError: OpenTelemetry is not installed.
    """

    own = exporter is None
    if own:
        exporter = _span_exporter(endpoint, protocol, headers, timeout_s)
    try:
        attempts = attempt_spans(calc, now)
        phases = phase_spans(calc, now)
        spans = to_readable_spans(calc.run, attempts + phases, resource(resource_attributes))
        failed = _send(exporter, spans, OtlpGuard(exporter) if own else None)
    finally:
        if own:
            exporter.shutdown()
    return {"spans": len(spans), "failed": failed, "attempts": len(attempts),
            "phases": len(phases)}


class OtelTraceExporter(Exporter):
    """The monitor's trace exporter: sends each phase once it has ended, and each
    attempt once it has ended (at the monitor's final cycle, what is still open).

    Args: as :class:`~goodput_core.exporters.otel.OtelExporter` (endpoint,
    protocol, headers, timeout_s, resource_attributes; ``exporter``: an SDK
    ``SpanExporter`` to use instead of OTLP).
    """

    name = "otel-trace"
    wants_trace = True

    def __init__(self, endpoint: Optional[str] = None, *, protocol: Optional[str] = None,
                 headers: Optional[Mapping[str, str]] = None,
                 timeout_s: Optional[float] = None,
                 resource_attributes: Optional[Mapping[str, Any]] = None, exporter: Any = None):

        self._settings = None if exporter is not None else portable_settings(
            endpoint=endpoint, protocol=protocol, headers=headers, timeout_s=timeout_s,
            resource_attributes=resource_attributes)
        self._exporter = exporter if exporter is not None else _span_exporter(
            endpoint, protocol, headers, timeout_s)
        self._guard = OtlpGuard(self._exporter)
        self._resource = resource(resource_attributes)
        self._sent_attempts: Set[int] = set()
        self.sent = 0
        self.failed = 0
        self._warned = False
        self._closed = False

    def export(self, snapshot: MonitorSnapshot) -> None:
        """Sends the phases that ended and the attempts that closed."""
        delta = snapshot.trace
        if delta is None or self._closed:
            return
        attempts = [a for a in delta.attempts if a.span_id not in self._sent_attempts
                    and (a.closed or snapshot.final)]
        spans = to_readable_spans(snapshot.run, list(delta.phases) + attempts, self._resource)
        if not spans:
            return
        failed = _send(self._exporter, spans, self._guard)
        self._sent_attempts.update(a.span_id for a in attempts)
        self.sent += len(spans) - failed
        self.failed += failed
        if failed and not self._warned:
            self._warned = True
            logger.warning("goodput: the OpenTelemetry collector did not take %d spans; "
                           "later failures are only counted", failed)

    def process_spec(self) -> Optional[dict]:
        """Rebuilt in a monitor process from the same settings (not with a
        supplied SDK exporter, or settings that are not plain values)."""
        if self._settings is None:
            return None
        return registry.spec("otel-trace", **self._settings)

    def close(self) -> None:
        """Shuts the span exporter down (idempotent)."""
        if self._closed:
            return
        self._closed = True

        with quiet_sdk():
            try:
                self._exporter.shutdown()
            except Exception:  # noqa: BLE001
                logger.debug("goodput: span exporter shutdown failed", exc_info=True)

