"""Prometheus exporter: an opt-in HTTP endpoint (the reference has none).

Metrics (all labelled by ``run``), from the latest snapshot of each run:

=========================================  ==========================================
``goodput_ratio``                          cumulative goodput, 0-1
``goodput_productive_seconds``             productive time
``goodput_badput_seconds{bucket}``         every partition bucket by name, custom
                                           types as ``CUSTOM_BADPUT_EVENTS.<TYPE>``
                                           (so the sum is total - productive;
                                           ``DATA_LOADING_ASYNC`` overlaps productive
                                           time and is left out, as in Cloud Monitoring)
``goodput_total_seconds``                  total (measured) time
``goodput_disruptions``                    restarts
``goodput_max_productive_step``            the largest step whose progress was kept
``goodput_step_time_seconds{quantile}``    step-time quantiles (0.5, 0.9, 0.99), from
                                           the monitor's sketch: within 0.5 % of the
                                           step time of rank ⌊q·(n-1)⌋
``goodput_ideal_step_time_seconds``        the ideal step time
``goodput_window_ratio{window}``           rolling-window goodput, 0-1, window "<N>s"
``goodput_recorder_dropped_events_total``  events the local recorder dropped (counter)
``goodput_slice_efficiency{kind,window}``  slice efficiency, 0-1: kind ``stepping`` or
                                           ``available``, window ``cumulative`` or
                                           "<N>s" (runs with slice counts)
``goodput_program_ratio``                  program goodput (MFU), 0-1
``goodput_ml_productivity_ratio``          runtime goodput × program goodput, 0-1
``goodput_metric{name}``                   the latest value of each model metric
``goodput_hung``                           1 while a hang is open, else 0
``goodput_hang_seconds``                   seconds of every hang so far
``goodput_checkpoint_interval_seconds``    checkpoint interval: ``kind`` ``current``
``{kind}``                                 or ``recommended`` (runs with advice)
``goodput_host_local_seconds``             host-local time of the top 10 hosts and
``{process_index}``                        the median host (``median``)
``goodput_host_outlier{process_index,``    1 for each outlier host, with its bucket
``bucket}``
``goodput_run_stopped``                    1 while the run is stopped (no sign of life,
                                           or a recorded disruption last), else 0
                                           (where the engine tells a run's state)
``goodput_run_running``                    1 while the run runs (neither ended nor
                                           stopped), else 0: the shipped alert rules
                                           fire for running runs only
``goodput_run_stopped_cause{cause}``       1 for a stopped run, with why (a
                                           disruption's cause, or ``no sign of life``)
``goodput_run_stopped_time_seconds``       where a stopped run stopped (POSIX time)
=========================================  ==========================================

The metrics live on a private ``CollectorRegistry`` (never the global one,
so several monitors and the user's own metrics do not collide), served by
prometheus_client's HTTP server bound to 127.0.0.1 unless told otherwise.
Port 9431 is refused: Orbax serves its own metrics there.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from goodput_core.exporters import registry
from goodput_core.exporters.base import Exporter, MonitorSnapshot
from goodput_core.exporters.latest import LatestFigures, figures
from goodput_core.settings import ORBAX_PROMETHEUS_PORT

__all__ = ["PrometheusExporter", "RESERVED_PORT"]

#: Orbax's metrics port: never ours.
RESERVED_PORT = ORBAX_PROMETHEUS_PORT


class _SnapshotCollector:
    """A prometheus_client collector over the latest snapshot of each run."""

    def __init__(self, quantiles: Sequence[float]):
        self._latest = LatestFigures(quantiles)

    def update(self, snap: MonitorSnapshot) -> None:
        self._latest.update(snap)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        def gauge(name, doc, extra=()):
            return GaugeMetricFamily(name, doc, labels=("run",) + tuple(extra))

        fams = {
            "ratio": gauge("goodput_ratio", "Cumulative goodput (0-1)."),
            "prod": gauge("goodput_productive_seconds", "Productive time in seconds."),
            "bad": gauge("goodput_badput_seconds", "Badput in seconds by bucket.", ("bucket",)),
            "total": gauge("goodput_total_seconds", "Total measured time in seconds."),
            "disr": gauge("goodput_disruptions", "Restarts of the run."),
            "step": gauge("goodput_max_productive_step", "Largest step whose progress was kept."),
            "q": gauge("goodput_step_time_seconds", "Step-time quantiles in seconds.",
                       ("quantile",)),
            "ideal": gauge("goodput_ideal_step_time_seconds", "Ideal step time in seconds."),
            "win": gauge("goodput_window_ratio", "Rolling-window goodput (0-1).", ("window",)),
            "eff": gauge("goodput_slice_efficiency", "Slice efficiency (0-1) by kind "
                         "(stepping, available) and window.", ("kind", "window")),
            "prog": gauge("goodput_program_ratio", "Program goodput: model FLOPs "
                          "utilisation during productive time (0-1)."),
            "mlp": gauge("goodput_ml_productivity_ratio",
                         "ML productivity goodput: runtime x program goodput (0-1)."),
            "metric": gauge("goodput_metric", "Latest value of a model metric.", ("name",)),
            "hung": gauge("goodput_hung", "1 while the run is hung (no progress), else 0."),
            "hang": gauge("goodput_hang_seconds", "Seconds of every hang so far."),
            "ckpt": gauge("goodput_checkpoint_interval_seconds", "Checkpoint interval in "
                          "seconds: current and recommended.", ("kind",)),
            "host": gauge("goodput_host_local_seconds", "Host-local badput seconds of the "
                          "top hosts and the median host.", ("process_index",)),
            "outlier": gauge("goodput_host_outlier", "1 for a host whose host-local time "
                             "makes it an outlier.", ("process_index", "bucket")),
            "stopped": gauge("goodput_run_stopped", "1 while the run is stopped (no sign of "
                             "life, or ended by a disruption), else 0."),
            "running": gauge("goodput_run_running", "1 while the run runs (neither ended "
                             "nor stopped), else 0: alerts fire for running runs only."),
            "stopped_cause": gauge("goodput_run_stopped_cause", "1 for why a stopped run "
                                   "stopped (label cause).", ("cause",)),
            "stopped_at": gauge("goodput_run_stopped_time_seconds",
                                "POSIX time at which a stopped run stopped."),
            "sg": gauge("goodput_scheduling_ratio", "Scheduling goodput: time holding the "
                        "resources / time since submission (0-1)."),
            "ettr": gauge("goodput_ettr_ratio", "Effective training-time ratio: productive "
                          "time / time since submission (0-1)."),
            "mpg": gauge("goodput_mpg_ratio", "ML productivity goodput: scheduling x runtime "
                         "x program goodput (0-1)."),
            "sched": gauge("goodput_scheduling_seconds", "Time waiting for resources."),
            "inc": gauge("goodput_incidents", "Incidents: disruptions followed by a "
                         "restart, and a stop not restarted (open)."),
            "mtbf": gauge("goodput_mtbf_seconds", "Mean time between failures."),
            "mttr": gauge("goodput_mttr_seconds", "Mean time from a failure to the next "
                          "attempt's first step."),
            "drop": CounterMetricFamily("goodput_recorder_dropped_events",
                                        "Events the local recorder dropped (queue full).",
                                        labels=("run",)),
        }
        for run, s in self._latest.runs():
            for key, labels, value in figures(s):
                fams[key].add_metric([run, *labels], value)
        yield from fams.values()


def _serve_inherited(fd: int, registry: Any) -> Tuple[Any, threading.Thread]:
    """prometheus_client's HTTP server on a socket that is already listening."""
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.exposition import (
        ThreadingWSGIServer, _SilentHandler, make_wsgi_app)

    sock = socket.socket(fileno=fd)

    class Server(ThreadingWSGIServer):
        address_family = sock.family

    server = Server(sock.getsockname()[:2], _SilentHandler, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.server_address = sock.getsockname()
    host, port = server.server_address[:2]
    server.server_name, server.server_port = host, port  # what HTTPServer.server_bind sets
    WSGIServer.setup_environ(server)
    server.set_app(make_wsgi_app(registry))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


class PrometheusExporter(Exporter):
    """Serves the latest snapshot of each run on ``http://<addr>:<port>/metrics``.

    Args:
      port: the TCP port; 0 picks a free one (read it back from ``.port``).
      addr: the address to bind (default loopback only).
      quantiles: the step-time quantiles to publish.
      inherit_fd: serve on this already listening socket (a monitor process
        takes over the training process's socket: same port, no scrape lost).

    Raises:
      ValueError: port 9431 (Orbax's) or a port out of range.
      ImportError: prometheus_client is not installed.
      OSError: the port is in use.
    """

    name = "prometheus"

    def __init__(self, port: int = 0, addr: str = "127.0.0.1", *,
                 quantiles: Sequence[float] = (0.5, 0.9, 0.99),
                 inherit_fd: Optional[int] = None):
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an integer in 0..65535, got {port!r}")
        if port == RESERVED_PORT:
            raise ValueError(f"port {RESERVED_PORT} is Orbax's metrics port; choose another")
        if not all(0.0 <= float(q) <= 1.0 for q in quantiles):
            raise ValueError(f"quantiles must be within [0, 1], got {list(quantiles)}")
        import prometheus_client  # only this module imports it
        from prometheus_client.registry import CollectorRegistry

        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = _SnapshotCollector([float(q) for q in quantiles])
        self.registry.register(self._collector)
        if inherit_fd is None:
            self._server, self._thread = prometheus_client.start_http_server(
                port, addr=addr, registry=self.registry)
        else:
            self._server, self._thread = _serve_inherited(inherit_fd, self.registry)
        self.addr = addr
        self.port: int = int(self._server.server_port)
        self.quantiles = tuple(float(q) for q in quantiles)
        self._closed = False
        self._handed_fd: Optional[int] = None

    def process_spec(self) -> Optional[dict]:
        """Rebuilt in a monitor process, serving on this exporter's socket."""
        return registry.spec("prometheus", port=self.port, addr=self.addr,
                             quantiles=list(self.quantiles))

    def hand_over(self) -> int:
        """Stops serving here (the socket stays open: connections wait in its
        backlog) and returns a descriptor of it for the monitor process."""
        self._server.shutdown()  # returns once the serve loop has ended
        self._thread.join(timeout=5.0)
        self._handed_fd = os.dup(self._server.fileno())
        return self._handed_fd

    def take_back(self) -> None:
        """The monitor process could not start: serve from here again."""
        self._drop_handed()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _drop_handed(self) -> None:
        if self._handed_fd is not None:
            os.close(self._handed_fd)
            self._handed_fd = None

    @property
    def url(self) -> str:
        """The metrics URL."""
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def export(self, snapshot: MonitorSnapshot) -> None:
        """Makes the snapshot's figures the ones served."""
        self._collector.update(snapshot)

    def close(self) -> None:
        """Shuts the HTTP server down and frees the port (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._drop_handed()
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)


def cli_arguments(parser: Any) -> None:
    """``goodput monitor --prometheus PORT [--prometheus-addr ADDR]``."""
    parser.add_argument("--prometheus", metavar="PORT", type=int,
                        help="serve Prometheus metrics on 127.0.0.1:PORT (0: a free port)")
    parser.add_argument("--prometheus-addr", metavar="ADDR", default="127.0.0.1",
                        help="address the Prometheus endpoint binds (default 127.0.0.1)")


def from_cli(args: Any) -> List[Exporter]:
    """The exporter ``--prometheus`` asks for (none without it); says its URL.

    Raises:
      ValueError: a bad port, or one that cannot be served.
    """
    if args.prometheus is None:
        return []
    try:
        exporter = PrometheusExporter(args.prometheus, args.prometheus_addr)
    except OSError as exc:
        raise ValueError(f"cannot serve Prometheus metrics on port {args.prometheus}: "
                         f"{exc}") from None
    print(f"Serving Prometheus metrics on {exporter.url}", flush=True)
    return [exporter]
