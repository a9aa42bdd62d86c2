"""Loopback fakes for the Cloud Monitoring exporter's tests (no network, no credentials).

:class:`FakeCloudMonitoring` is a real gRPC server on ``127.0.0.1`` serving
``google.monitoring.v3.MetricService/CreateTimeSeries`` with the client
library's own message types (the proto-plus classes' serialisers; the
package ships no ``*_pb2_grpc`` servicer). The real ``MetricServiceClient``
reaches it through its public options, either

* TLS with the suite's loopback certificate (:mod:`tests.support.loopback_tls`)
  and ``client_options={"api_endpoint": fake.endpoint}``, or
* plaintext with ``transport=MetricServiceGrpcTransport(channel=
  grpc.insecure_channel(fake.address))`` (:meth:`FakeCloudMonitoring.insecure_client`).

It records every request and its metadata, and checks what the service
checks: a ``projects/<p>`` name, 1 to 200 series per call, one point per
series, no series twice in a call, a value set, and per series end times
strictly after the last stored point ("Points must be written in order").
Series that break a rule are recorded in :attr:`violations`, the others are
stored, and the call fails with INVALID_ARGUMENT, as the service does.

:class:`FakeMetadataServer` is a loopback HTTP GCE metadata server
(``Metadata-Flavor: Google`` required) that records the paths it is asked
for; point ``GCE_METADATA_HOST`` at :attr:`FakeMetadataServer.host`.
"""

from __future__ import annotations

import http.server
import threading
from typing import Any, Dict, List, Optional, Tuple

import grpc
from google.cloud.monitoring_v3.types import CreateTimeSeriesRequest
from google.protobuf import empty_pb2

from tests.support.loopback_grpc import LoopbackGrpcServer

__all__ = ["FakeCloudMonitoring", "FakeMetadataServer", "Received", "series_key"]

_SERVICE = "google.monitoring.v3.MetricService"
_MAX_SERIES = 200


def series_key(ts) -> Tuple[str, Tuple, str, Tuple]:
    """The identity of a series: metric type and labels, resource type and labels."""
    return (ts.metric.type, tuple(sorted(ts.metric.labels.items())),
            ts.resource.type, tuple(sorted(ts.resource.labels.items())))


class Received:
    """One recorded CreateTimeSeries call.

    Attributes:
      name: the request's ``name``.
      series: the raw ``TimeSeries`` protobufs, in request order.
      metadata: the call's invocation metadata, ``{key: value}``.
    """

    def __init__(self, pb, metadata: Dict[str, str]):
        self.name = pb.name
        self.series = list(pb.time_series)
        self.metadata = metadata


class FakeCloudMonitoring(LoopbackGrpcServer):
    """A loopback ``MetricService`` server (use as a context manager).

    Args:
      tls: serve TLS with the loopback certificate (the ``api_endpoint``
        route); False serves plaintext (for an explicit insecure channel).
    """

    def __init__(self, *, tls: bool = True):
        super().__init__(tls=tls, max_workers=4)
        self._lock = threading.Lock()
        self._failure: Optional[Tuple[grpc.StatusCode, str]] = None
        self._last_end: Dict[Tuple, int] = {}
        self.requests: List[Received] = []
        self.violations: List[str] = []
        self.failed = 0

    # ---------------------------------------------------------- lifecycle
    def handlers(self):
        return _SERVICE, {"CreateTimeSeries": grpc.unary_unary_rpc_method_handler(
            self._create, request_deserializer=CreateTimeSeriesRequest.deserialize,
            response_serializer=empty_pb2.Empty.SerializeToString)}

    def insecure_client(self):
        """A real ``MetricServiceClient`` on a plaintext channel to this server."""
        from google.cloud.monitoring_v3 import MetricServiceClient
        from google.cloud.monitoring_v3.services.metric_service.transports import (
            MetricServiceGrpcTransport,
        )

        channel = grpc.insecure_channel(self.address)
        return MetricServiceClient(transport=MetricServiceGrpcTransport(channel=channel))

    # ---------------------------------------------------------- test controls
    def fail(self, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE,
             message: str = "fake outage") -> None:
        """Every call fails with ``code`` and ``message`` until :meth:`heal`."""
        with self._lock:
            self._failure = (code, message)

    def heal(self) -> None:
        with self._lock:
            self._failure = None

    def series(self) -> List[Any]:
        """Every received series of every call, in arrival order."""
        with self._lock:
            return [ts for r in self.requests for ts in r.series]

    # ---------------------------------------------------------- the RPC
    def _create(self, request, context):
        pb = CreateTimeSeriesRequest.pb(request)
        metadata = {k: v for k, v in context.invocation_metadata()}
        with self._lock:
            self.requests.append(Received(pb, metadata))
            failure = self._failure
            if failure is not None:
                self.failed += 1
            else:
                bad = self._check(pb)
        if failure is not None:
            context.abort(*failure)
        if bad:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "; ".join(bad))
        return empty_pb2.Empty()

    def _check(self, pb) -> List[str]:
        """Validates a request like the service; stores its valid points."""
        bad = []
        if not pb.name.startswith("projects/") or len(pb.name) <= len("projects/"):
            bad.append(f"bad name {pb.name!r}")
        if not 1 <= len(pb.time_series) <= _MAX_SERIES:
            bad.append(f"{len(pb.time_series)} series in one request")
        seen = set()
        for ts in pb.time_series:
            key = series_key(ts)
            if key in seen:
                bad.append(f"series written twice in one request: {key}")
                continue
            seen.add(key)
            if len(ts.points) != 1:
                bad.append(f"{len(ts.points)} points for one series: {key}")
                continue
            if not ts.resource.type or not ts.metric.type:
                bad.append(f"missing metric or resource type: {key}")
                continue
            point = ts.points[0]
            if point.value.WhichOneof("value") is None:
                bad.append(f"no value: {key}")
                continue
            end = point.interval.end_time.ToNanoseconds()
            last = self._last_end.get(key)
            if last is not None and end <= last:
                bad.append(f"points must be written in order: {key}")
                continue
            self._last_end[key] = end
        self.violations.extend(bad)
        return bad


class _MetadataHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server naming)
        fake: FakeMetadataServer = self.server.fake  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0]
        with fake.lock:
            fake.requests.append(path)
        if self.headers.get("Metadata-Flavor") != "Google":
            return self._reply(403, "missing Metadata-Flavor header")
        prefix = "/computeMetadata/v1/"
        value = fake.values.get(path[len(prefix):]) if path.startswith(prefix) else None
        if value is None:
            return self._reply(404, "not found")
        return self._reply(200, value)

    def _reply(self, status: int, text: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", "application/text")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # keep test output quiet
        pass


class FakeMetadataServer:
    """A loopback GCE metadata server (use as a context manager).

    Args:
      values: ``{"project/project-id": "p", "instance/zone": "projects/1/zones/z",
        "instance/machine-type": "projects/1/machineTypes/m"}``; missing
        paths answer 404.
    """

    def __init__(self, values: Optional[Dict[str, str]] = None):
        self.values = dict(values or {})
        self.requests: List[str] = []
        self.lock = threading.Lock()
        self._httpd = None
        self._thread = None

    def start(self) -> "FakeMetadataServer":
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _MetadataHandler)
        self._httpd.fake = self  # type: ignore[attr-defined]
        self._httpd.daemon_threads = True
        # A short poll interval: shutdown() waits up to one interval.
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,),
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._httpd = None

    def __enter__(self) -> "FakeMetadataServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``: the value for ``GCE_METADATA_HOST``."""
        return f"127.0.0.1:{self._httpd.server_address[1]}"
