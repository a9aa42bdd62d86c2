"""OTLP plumbing shared by the OpenTelemetry metric and trace exporters.

Secrets: an endpoint's user part and every request header (given in code or
by ``OTEL_EXPORTER_OTLP_HEADERS``) are hidden from our messages and from the
OpenTelemetry SDK's own log lines (:func:`goodput_core.redact.guard_loggers`
filters its loggers before an exporter is built); a gRPC endpoint with a
user part is refused (gRPC takes credentials as headers).

Everything is configured as OpenTelemetry users expect: the standard
variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_PROTOCOL``,
``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_EXPORTER_OTLP_TIMEOUT``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME`` and their per-signal
forms) are read by the official exporters themselves; arguments given in code
win over them. Only this module and the two exporters import OpenTelemetry.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Dict, List, Mapping, Optional

from goodput_core.exporters.registry import kind_of_signal
from goodput_core.redact import guard_loggers, redact, remember, secrets_of
from goodput_core.settings import parse_otel_signals

__all__ = ["PROTOCOLS", "DEFAULT_TIMEOUT_S", "cli_arguments", "export_timeout", "from_cli",
           "keep_secret", "otlp_exporter", "protocol_of", "resource"]

#: The OTLP transports the official Python exporters implement.
PROTOCOLS = ("http/protobuf", "grpc")
#: Our default export timeout when neither the code nor OTEL_EXPORTER_OTLP_TIMEOUT
#: sets one: shorter than OpenTelemetry's 10 s, so a collector that is down costs a
#: monitor cycle at most this long (the exporter retries with backoff until then).
DEFAULT_TIMEOUT_S = 5.0
_PATHS = {"metrics": "/v1/metrics", "traces": "/v1/traces"}
#: The loggers whose lines may show an endpoint or a header: the SDK's and ours.
_GUARDED = ("opentelemetry", "goodput_core.exporters")


def protocol_of(signal: str, protocol: Optional[str] = None) -> str:
    """The OTLP protocol for ``signal`` ("metrics" or "traces").

    ``protocol``, else ``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL``, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``http/protobuf`` (OpenTelemetry's
    default).

    Raises:
      ValueError: a protocol the Python exporters do not implement (``http/json``).
    """
    value = (protocol or os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
             or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
    value = value.strip().lower()
    if value not in PROTOCOLS:
        raise ValueError(f"OTLP protocol {value!r} is not supported: use one of "
                         f"{', '.join(PROTOCOLS)} (OTEL_EXPORTER_OTLP_PROTOCOL)")
    return value


def export_timeout(signal: str, timeout_s: Optional[float] = None) -> float:
    """The export deadline in seconds: ``timeout_s``, else
    ``OTEL_EXPORTER_OTLP_<SIGNAL>_TIMEOUT`` / ``OTEL_EXPORTER_OTLP_TIMEOUT``
    (milliseconds), else :data:`DEFAULT_TIMEOUT_S`."""
    if timeout_s is not None:
        value = float(timeout_s)
    else:
        raw = (os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_TIMEOUT")
               or os.environ.get("OTEL_EXPORTER_OTLP_TIMEOUT"))
        try:  # the variables are in milliseconds per the specification
            value = float(raw) / 1000.0 if raw else DEFAULT_TIMEOUT_S
        except ValueError:
            raise ValueError(f"OTEL_EXPORTER_OTLP_TIMEOUT must be milliseconds, got {raw!r}")
    if not value > 0:
        raise ValueError(f"the OTLP timeout must be > 0 seconds, got {value}")
    return value


def otlp_exporter(signal: str, *, endpoint: Optional[str] = None,
                  protocol: Optional[str] = None, headers: Optional[Mapping[str, str]] = None,
                  timeout_s: Optional[float] = None, insecure: Optional[bool] = None) -> Any:
    """The official OTLP exporter for ``signal`` ("metrics" or "traces").

    Args:
      endpoint: the collector's base URL, as ``OTEL_EXPORTER_OTLP_ENDPOINT``
        (e.g. ``http://localhost:4318`` for HTTP, ``http://localhost:4317`` for
        gRPC); the HTTP signal path (``/v1/metrics``, ``/v1/traces``) is added.
        None: the standard variables, else OpenTelemetry's default.
      protocol: ``http/protobuf`` or ``grpc`` (None: the standard variables).
      headers: extra request headers (None: ``OTEL_EXPORTER_OTLP_HEADERS``).
      timeout_s: the export deadline, retries included (None: the standard
        variable, else :data:`DEFAULT_TIMEOUT_S`).
      insecure: gRPC without TLS (None: an ``http://`` endpoint is insecure).

    Raises:
      ValueError: an unsupported protocol or a bad timeout.
      ImportError: the exporter package is missing (``pip install 'goodput-core[otel]'``).
    """
    proto = protocol_of(signal, protocol)
    timeout = export_timeout(signal, timeout_s)
    kwargs: Dict[str, Any] = {"timeout": timeout}
    keep_secret(endpoint, headers)
    if headers is not None:
        kwargs["headers"] = dict(headers)
    if proto == "grpc":
        if endpoint is not None and "@" in endpoint.split("://", 1)[-1].partition("/")[0]:
            raise ValueError(f"the gRPC endpoint {redact(endpoint)!r} holds a user part: gRPC "
                             "takes credentials as headers (OTEL_EXPORTER_OTLP_HEADERS)")
        if signal == "metrics":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as cls
        else:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as cls
        guard_loggers(_GUARDED)
        if endpoint is not None:
            kwargs["endpoint"] = endpoint
            if insecure is None and endpoint.startswith("http://"):
                insecure = True
        if insecure is not None:
            kwargs["insecure"] = insecure
        return cls(**kwargs)
    if signal == "metrics":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as cls
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as cls
    guard_loggers(_GUARDED)  # before the exporter reads OTEL_EXPORTER_OTLP_HEADERS (and may warn)
    if endpoint is not None:
        kwargs["endpoint"] = endpoint.rstrip("/") + _PATHS[signal]
    return cls(**kwargs)


def keep_secret(endpoint: Optional[str], headers: Optional[Mapping[str, str]]) -> None:
    """Remembers an endpoint's credentials and the header values given in code,
    so that no later message or OpenTelemetry log line shows them
    (:func:`goodput_core.redact.remember`; the ``OTEL_*_HEADERS`` variables are
    read by :func:`~goodput_core.redact.redact` itself)."""
    if endpoint:
        remember(*secrets_of(endpoint))
    for value in (headers or {}).values():
        remember(str(value), str(value).strip())


def resource(extra: Optional[Mapping[str, Any]] = None) -> Any:
    """The resource describing this process, overridable by the standard variables.

    Ours: ``service.name`` ``goodput``, ``host.name``, ``process.pid``, plus
    ``extra`` (e.g. ``goodput.process_index``). ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES`` take precedence over every one of them.
    """
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource, SERVICE_NAME

    ours: Dict[str, Any] = {SERVICE_NAME: "goodput", "host.name": socket.gethostname(),
                            "process.pid": os.getpid()}
    ours.update(extra or {})
    env = OTELResourceDetector().detect()
    service = os.environ.get("OTEL_SERVICE_NAME")
    if service:
        env = env.merge(Resource({SERVICE_NAME: service}))
    return Resource.create(ours).merge(env)


def cli_arguments(parser: Any) -> None:
    """``goodput monitor --otel [SIGNALS] [--otel-endpoint URL] [--otel-protocol P]``."""
    otel = parser.add_argument_group("OpenTelemetry (the OTEL_* variables configure the rest)")
    otel.add_argument("--otel", metavar="SIGNALS", nargs="?", const="metrics",
                      help="send over OTLP: metrics (the default), traces (each phase "
                           "as a span once it ends) or metrics,traces")
    otel.add_argument("--otel-endpoint", metavar="URL",
                      help="the collector's base URL (default: $OTEL_EXPORTER_OTLP_ENDPOINT)")
    otel.add_argument("--otel-protocol", choices=PROTOCOLS,
                      help="default: $OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf")


def from_cli(args: Any) -> List[Any]:
    """The exporters ``--otel`` asks for, one per signal (none without it).

    Raises:
      ValueError: bad signals, a bad endpoint, or the options without ``--otel``.
    """
    signals = parse_otel_signals(args.otel, "--otel")
    if not signals:
        if args.otel_endpoint or args.otel_protocol:
            raise ValueError("--otel-endpoint and --otel-protocol go with --otel")
        return []
    return [kind_of_signal(s).build(args.otel_endpoint, protocol=args.otel_protocol)
            for s in signals]
