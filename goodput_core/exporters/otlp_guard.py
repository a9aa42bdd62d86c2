"""Sending over OTLP without waiting on a collector that is down, and in one line.

The official OTLP exporters retry a collector that refuses connections until
their timeout (5 s by default here), logging each try; at a job's exit that
is seconds of waiting on nothing and a screenful of the SDK's lines. So, for
the metric and trace exporters:

* **Refused: at once.** Before each send, :meth:`OtlpGuard.unreachable`
  opens a TCP connection to the collector (a loopback refusal takes
  microseconds, a remote one a round trip); refused, or no answer to the
  handshake within a second: the send is not tried (counted as failed).
* **Bounded.** A send gets at most its timeout, and never past the deadline
  the monitor gives its snapshot (:attr:`MonitorSnapshot.deadline
  <goodput_core.exporters.base.MonitorSnapshot.deadline>`: at ``stop()``,
  what is left of the exit budget), so a collector that accepts and never
  answers costs what is left, not more.
* **Quiet.** While we send, the SDK exporters' own log records on this thread
  are held back (:func:`quiet_sdk`); the exporter logs one line of its own,
  with the reason read from them (:func:`reason_of`).

Where a proxy would carry the request (``HTTP(S)_PROXY``), or the endpoint is
not a plain ``host:port``, no connection is tried: the send decides.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
import urllib.parse
import urllib.request
from typing import Iterator, List, Optional, Tuple

__all__ = ["OtlpGuard", "quiet_sdk", "reason_of", "SDK_LOGGERS", "PROBE_TIMEOUT_S"]

#: The loggers the OTLP exporters of opentelemetry-exporter-otlp-proto-{http,grpc} use.
SDK_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.metric_exporter",
               "opentelemetry.exporter.otlp.proto.http.trace_exporter",
               "opentelemetry.exporter.otlp.proto.http",
               "opentelemetry.exporter.otlp.proto.grpc.exporter",
               "opentelemetry.exporter.otlp.proto.grpc")
#: How long the TCP handshake with the collector may take before it counts as down.
PROBE_TIMEOUT_S = 1.0
_MARGIN_S = 0.05  # left of a deadline for counting and logging after the send

_local = threading.local()


class _HoldBack(logging.Filter):
    """Drops the SDK's records on a thread that is inside :func:`quiet_sdk`,
    keeping their text for the one line we log."""

    def filter(self, record: logging.LogRecord) -> bool:
        heard = getattr(_local, "heard", None)
        if heard is None:
            return True
        try:
            heard.append(record.getMessage())
        except Exception:  # noqa: BLE001 - a message that cannot be formatted
            heard.append(str(record.msg))
        return False


_FILTER = _HoldBack()
_installed = False
_install_lock = threading.Lock()


def _install() -> None:
    global _installed
    with _install_lock:
        if not _installed:
            for name in SDK_LOGGERS:
                logging.getLogger(name).addFilter(_FILTER)
            _installed = True


@contextlib.contextmanager
def quiet_sdk() -> Iterator[List[str]]:
    """Holds back the OTLP exporters' log records on this thread; yields the
    list their messages are collected in."""
    _install()
    outer = getattr(_local, "heard", None)
    heard: List[str] = []
    _local.heard = heard
    try:
        yield heard
    finally:
        _local.heard = outer


def reason_of(heard: List[str], error: Optional[BaseException] = None) -> str:
    """A short reason for a failed send, from what the SDK said (never its full
    text: it may carry the endpoint's address)."""
    text = " ".join(heard + ([f"{type(error).__name__}: {error}"] if error else [])).lower()
    if any(k in text for k in ("refused", "newconnectionerror", "failed to connect",
                               "unavailable", "connection reset")):
        return "the collector refused the connection"
    if any(k in text for k in ("timeout", "timed out", "deadline_exceeded", "deadline")):
        return "the collector did not answer in time"
    if error is not None:
        return f"{type(error).__name__}"
    return "the collector rejected it" if heard else "export failed"


def _target(endpoint: Optional[str]) -> Optional[Tuple[str, int]]:
    """``(host, port)`` to try for an exporter's endpoint: an URL (HTTP) or
    ``host:port`` (gRPC); None when it is neither, or a proxy would carry it."""
    if not endpoint or not isinstance(endpoint, str):
        return None
    if "://" in endpoint:
        parts = urllib.parse.urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None
        proxies = urllib.request.getproxies()
        if proxies.get(parts.scheme) and not urllib.request.proxy_bypass(parts.hostname):
            return None
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return None
        return parts.hostname, port
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit() or not host or "/" in host:
        return None
    return host.strip("[]"), int(port)


class OtlpGuard:
    """The collector one OTLP exporter sends to (module docstring).

    Args:
      exporter: the SDK exporter (its endpoint is read from it; an exporter
        given by the caller without one is never probed).
    """

    def __init__(self, exporter: object):
        self.target = _target(getattr(exporter, "_endpoint", None))

    @staticmethod
    def budget(timeout_s: float, deadline: Optional[float]) -> float:
        """Seconds a send may take: its timeout, and not past ``deadline``
        (``time.monotonic()``; None: none)."""
        if deadline is None:
            return timeout_s
        return max(0.0, min(timeout_s, deadline - time.monotonic() - _MARGIN_S))

    def unreachable(self, budget_s: float) -> Optional[str]:
        """Why the collector cannot take a send now (refused, or no answer to
        the handshake within ``min(PROBE_TIMEOUT_S, budget_s)``), else None."""
        if budget_s <= 0:
            return "no time left before the monitor's deadline"
        if self.target is None:
            return None
        try:
            with socket.create_connection(self.target, timeout=min(PROBE_TIMEOUT_S, budget_s)):
                return None
        except ConnectionRefusedError:
            return "the collector refused the connection"
        except socket.timeout:
            return "the collector did not answer the connection"
        except OSError as exc:  # no route, a name that does not resolve...
            return f"the collector cannot be reached ({type(exc).__name__})"
