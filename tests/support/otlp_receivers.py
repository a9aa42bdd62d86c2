"""Loopback OTLP receivers that decode the wire format, as a collector would.

* :class:`HttpReceiver`: OTLP/HTTP (binary protobuf, optional gzip) on
  ``/v1/metrics`` and ``/v1/traces``, decoded with ``opentelemetry-proto``.
* :class:`GrpcReceiver`: a ``grpcio`` server implementing the collector's
  ``MetricsService`` and ``TraceService``.

Both keep every decoded request; ``status`` makes the HTTP receiver refuse
(e.g. 400) and ``hold`` makes either one accept and never answer until
released (a collector that is black-holed).
"""

from __future__ import annotations

import gzip
import http.server
import threading
from concurrent import futures
from typing import Any, Dict, List, Optional

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

_REQUESTS = {"/v1/metrics": metrics_service_pb2.ExportMetricsServiceRequest,
             "/v1/traces": trace_service_pb2.ExportTraceServiceRequest}
_RESPONSES = {"/v1/metrics": metrics_service_pb2.ExportMetricsServiceResponse,
              "/v1/traces": trace_service_pb2.ExportTraceServiceResponse}


class _Store:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.metrics: List[Any] = []
        self.traces: List[Any] = []
        self.headers: List[Dict[str, str]] = []
        self.release = threading.Event()
        self.hold = False

    def add(self, kind: str, request: Any, headers: Dict[str, str]) -> None:
        with self.lock:
            (self.metrics if kind == "metrics" else self.traces).append(request)
            self.headers.append(headers)


class HttpReceiver(_Store):
    """An OTLP/HTTP receiver on 127.0.0.1 (``endpoint`` is its base URL)."""

    def __init__(self) -> None:
        super().__init__()
        self.status = 200
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if receiver.hold:
                    receiver.release.wait(30)
                    return
                if receiver.status != 200 or self.path not in _REQUESTS:
                    self.send_response(receiver.status if self.path in _REQUESTS else 404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = _REQUESTS[self.path].FromString(body)
                receiver.add(self.path.rsplit("/", 1)[1], request, dict(self.headers))
                out = _RESPONSES[self.path]().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()


class GrpcReceiver(_Store):
    """An OTLP/gRPC receiver (insecure) on 127.0.0.1 (``endpoint``: its URL)."""

    def __init__(self) -> None:
        super().__init__()
        import grpc

        receiver = self

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):  # noqa: N802 - the gRPC API
                receiver._maybe_hold()
                receiver.add("metrics", request, dict(context.invocation_metadata()))
                return metrics_service_pb2.ExportMetricsServiceResponse()

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):  # noqa: N802
                receiver._maybe_hold()
                receiver.add("traces", request, dict(context.invocation_metadata()))
                return trace_service_pb2.ExportTraceServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self._server)
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server.start()

    def _maybe_hold(self) -> None:
        if self.hold:
            self.release.wait(30)

    def close(self) -> None:
        self.release.set()
        self._server.stop(grace=None)


def clear_otel_env(monkeypatch: Any) -> None:
    """Removes the shell's OpenTelemetry settings (and ``GOODPUT_OTEL``) for a test."""
    import os

    for k in list(os.environ):
        if k.startswith("OTEL_") or k == "GOODPUT_OTEL":
            monkeypatch.delenv(k)


def gauge_points(requests: List[Any]) -> Dict[tuple, float]:
    """``{(metric name, frozenset(attributes)): value}`` of the last request that
    carried each point (numbers as sent: double or int)."""
    out: Dict[tuple, float] = {}
    for req in requests:
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    for p in getattr(m, kind).data_points:
                        attrs = frozenset((kv.key, _any_value(kv.value)) for kv in p.attributes)
                        value = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
                        out[(m.name, attrs)] = value
    return out


def units(requests: List[Any]) -> Dict[str, str]:
    """``{metric name: unit}`` as sent."""
    return {m.name: m.unit for req in requests for rm in req.resource_metrics
            for sm in rm.scope_metrics for m in sm.metrics}


def resource_attributes(request: Any) -> Dict[str, Any]:
    """The first resource's attributes of a metrics or traces request."""
    items = (request.resource_metrics if hasattr(request, "resource_metrics")
             else request.resource_spans)
    return {kv.key: _any_value(kv.value) for kv in items[0].resource.attributes}


def spans(requests: List[Any]) -> List[Any]:
    """Every span of the trace requests, in the order received."""
    return [s for req in requests for rs in req.resource_spans for ss in rs.scope_spans
            for s in ss.spans]


def span_attributes(span: Any) -> Dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in span.attributes}


def _any_value(v: Any) -> Optional[Any]:
    kind = v.WhichOneof("value")
    return None if kind is None else getattr(v, kind)
