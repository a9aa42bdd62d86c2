"""Google Cloud Monitoring exporter: the reference's ``compute.googleapis.com/workload/*`` series.

One :class:`CloudMonitoringExporter` per monitor. Each cycle it turns the
snapshot into time series on the monitored resource
``compute.googleapis.com/Workload`` (labels ``location``, ``workload_id`` =
run name, ``replica_id``) and writes them with one ``create_time_series``
call (more only past 200 series, the API's limit per call). Metric types,
label keys and values and value types are the reference's (0.2.3), with
these deliberate differences:

* ``performance`` carries only the ideal step time. The reference also
  writes the mean step deviation to that same series from another process,
  so the series alternates between two quantities.
* Nothing is looked up at construction. A missing project id, zone or
  accelerator type is fetched from the GCE metadata server on the first
  :meth:`~CloudMonitoringExporter.export` (the monitor's thread), once, with
  the short deadlines of :mod:`goodput_core.gcp`, and only
  where a metadata server is expected
  (:func:`~goodput_core.gcp.metadata_server_expected`: a
  Google Cloud VM, or ``GCE_METADATA_HOST`` set). Off Google Cloud the
  exporter disables itself with a warning instead of probing
  169.254.169.254. The caller's ``GCPOptions`` is copied, never filled in.
* A point's end time is the snapshot's query time (capped at ``clock()``),
  forced strictly above the previous cycle's so that two snapshots with the
  same query time never write two points at one instant; the reference
  stamps ``time.time()`` at send time.
* Nothing is sent for a result that measured nothing (no job start yet, or a
  rolling window with zero total time), where the reference sends zeros or
  skips inconsistently; no ``ideal step time = 0.0`` point without steps.

Elastic runs: ``stepping_slice_efficiency`` and ``available_slice_efficiency``
(fractions) come from the snapshot's slice efficiencies, with the
reference's labels: ``accelerator_type``, ``window_type="CUMULATIVE"`` and
``rolling_window_size="0"`` for the cumulative value (with the goodput
series), ``window_type="INTERVAL"`` and ``rolling_window_size="<N>"`` per
rolling window (with the rolling series). The monitor computes them only
when asked (``include_slice_efficiency``; the compat
``ElasticGoodputMonitor(include_slice_efficiency=True)``), as the reference
sends them only then. Program goodput, ML productivity goodput and model
metrics have no ``compute.googleapis.com/workload/*`` type and are not sent
(TensorBoard and Prometheus publish them).

Error contract: :meth:`~CloudMonitoringExporter.export` does NOT raise for
failures of the service, the transport or the credentials. Each is logged
once per kind (gRPC status name, or the exception class) with the server's
message only -- never request metadata, headers or credentials, and never the
exception's ``str()`` (auth errors can embed token-endpoint responses) -- and
counted in :attr:`~CloudMonitoringExporter.stats`. The monitor would
otherwise log every failed cycle again, with the raw client exception and its
chained gRPC debug strings. It raises only for programming errors (a bad
snapshot), which the monitor logs and skips like any exporter failure.
``google.cloud.monitoring_v3`` is imported only by this module, on first use.
"""

from __future__ import annotations

import collections
import copy
import logging
import math
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from goodput_core.timeline.buckets import BadputType
from goodput_core import gcp
from goodput_core.exporters.base import Exporter, MonitorSnapshot
from goodput_core.queries.results import GoodputResult

__all__ = [
    "CloudMonitoringExporter",
    "MAX_SERIES_PER_CALL",
    "METRIC_PREFIX",
    "RESOURCE_TYPE",
    "Series",
    "build_series",
]

logger = logging.getLogger(__name__)

RESOURCE_TYPE = "compute.googleapis.com/Workload"
METRIC_PREFIX = "compute.googleapis.com/workload/"
#: CreateTimeSeries accepts at most 200 series per request.
MAX_SERIES_PER_CALL = 200
_CUSTOM = BadputType.CUSTOM_BADPUT_EVENTS.name
# Badput keys never sent as a bucket of their own: async loading overlaps
# productive time (ACTIVITY_EXCLUSION_LIST); the custom total is sent per type.
_NOT_SENT = frozenset({BadputType.DATA_LOADING_ASYNC, BadputType.CUSTOM_BADPUT_EVENTS})
_BUMP_NS = 1_000_000  # 1 ms: the step a repeated end time is moved forward by
_MAX_MESSAGE = 300

#: One series of a cycle: (metric suffix, sorted label pairs, value, is int64).
Series = Tuple[str, Tuple[Tuple[str, str], ...], float, bool]


def _badput_items(result: GoodputResult, percent: bool) -> List[Tuple[str, float]]:
    """``(badput_source, value)`` pairs as the reference flattens them.

    Args:
      result: the result to break down.
      percent: percent of total time (interval series) instead of seconds.

    Returns:
      Every bucket but DATA_LOADING_ASYNC and the custom total, then
      ``CUSTOM_BADPUT_EVENTS.<TYPE>`` per custom type.
    """
    buckets = result.badput_percent if percent else result.badput_seconds
    custom = result.custom_badput_percent if percent else result.custom_badput_seconds
    items = [(BadputType(k).name, v) for k, v in buckets.items()
             if BadputType(k) not in _NOT_SENT]
    items += [(f"{_CUSTOM}.{str(name).upper()}", v) for name, v in custom.items()]
    return items


def _measured(result: Optional[GoodputResult]) -> bool:
    """True when the result covers some measured time (a job has started)."""
    return (result is not None and not math.isnan(result.lifetime[0])
            and result.total_seconds > 0)


def build_series(snapshot: MonitorSnapshot, options: Any, *, include_badput_breakdown: bool = True,
                 include_step_deviation: bool = True, include_rolling: bool = True
                 ) -> List[Series]:
    """The series one snapshot yields (pure: no client, no lookups).

    Args:
      snapshot: the monitor's results.
      options: resolved GCP options (``acc_type``, ``cluster_name`` and the
        two ``enable_gcp_*`` flags are read).
      include_badput_breakdown: send ``badput_time`` / ``interval_badput``.
      include_step_deviation: send ``step_time_deviation`` / ``performance``.
      include_rolling: send ``interval_goodput`` / ``interval_badput``.

    Returns:
      Series in a stable order, each (metric type, labels) at most once.
    """
    acc = str(options.acc_type or "UNKNOWN")
    cluster = getattr(options, "cluster_name", None)
    extra = {"cluster_name": str(cluster)} if cluster else {}
    out: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], Series] = {}

    def add(metric: str, value: Any, is_int: bool = False, **labels: str) -> None:
        if not is_int and not math.isfinite(float(value)):
            return  # the API rejects NaN/inf points; skip rather than fail the call
        if labels.get("accelerator_type") is not None:
            labels.update(extra)  # the reference's optional label, not on `performance`
        key = (metric, tuple(sorted(labels.items())))
        out[key] = (metric, key[1], int(value) if is_int else float(value), is_int)

    cum = snapshot.cumulative
    if options.enable_gcp_goodput_metrics and _measured(cum):
        add("goodput_time", cum.productive_seconds, goodput_source="TOTAL", accelerator_type=acc)
        if include_badput_breakdown:
            for source, seconds in _badput_items(cum, percent=False):
                add("badput_time", seconds, badput_source=source, accelerator_type=acc)
        add("disruptions", cum.disruptions, True, accelerator_type=acc, window_type="cumulative")
        add("max_productive_steps", cum.max_productive_step, True, accelerator_type=acc)
        add("total_elapsed_time", cum.total_seconds, accelerator_type=acc,
            window_type="cumulative")
        _efficiency(add, snapshot.slice_efficiency, acc, "CUMULATIVE", "0")
    stats = snapshot.step_stats
    if include_step_deviation and options.enable_gcp_step_deviation_metrics and stats is not None:
        if stats.count and stats.ideal_step_time is not None:  # (not the whole run's deviations)
            add("step_time_deviation", stats.deviation_aggregate, accelerator_type=acc)
        if stats.ideal_step_time is not None:
            add("performance", stats.ideal_step_time)  # ideal step time only, no labels
    if include_rolling and options.enable_gcp_goodput_metrics:
        for size, res in sorted(snapshot.rolling.items()):
            if not _measured(res):
                continue  # a window without measured time has no percentages
            window = str(int(size))
            add("interval_goodput", res.goodput, goodput_source="TOTAL", accelerator_type=acc,
                rolling_window_size=window)
            if include_badput_breakdown:
                for source, pct in _badput_items(res, percent=True):
                    add("interval_badput", pct, badput_source=source, accelerator_type=acc,
                        rolling_window_size=window)
            _efficiency(add, snapshot.rolling_slice_efficiency.get(size), acc, "INTERVAL",
                        window)
    return list(out.values())


def _efficiency(add: Callable[..., None], eff: Any, acc: str, window_type: str,
                window_size: str) -> None:
    """The two slice-efficiency series of one window (the reference's labels:
    upper-case ``window_type`` values, unlike ``disruptions``' "cumulative")."""
    if eff is None:
        return
    for metric, value in (("stepping_slice_efficiency", eff.stepping),
                          ("available_slice_efficiency", eff.available)):
        add(metric, value, accelerator_type=acc, window_type=window_type,
            rolling_window_size=window_size)


def _describe(exc: BaseException) -> Tuple[str, str]:
    """(kind, safe message) of a client failure; never headers or credentials.

    API errors give their gRPC status name and the server's message; any
    other failure (auth, transport, ...) only its class name, because their
    text may embed token-endpoint replies or request details.
    """
    try:
        from google.api_core import exceptions as api_exceptions
    except ImportError:  # the client library itself is missing
        return type(exc).__name__, ""
    if isinstance(exc, api_exceptions.GoogleAPICallError):
        status = exc.grpc_status_code
        kind = status.name if status is not None else f"HTTP {exc.code}"
        message = " ".join(str(exc.message or "").split())  # one line
        if len(message) > _MAX_MESSAGE:
            message = message[:_MAX_MESSAGE] + "..."
        return kind, message
    return type(exc).__name__, ""


class CloudMonitoringExporter(Exporter):
    """Writes snapshots to Google Cloud Monitoring (see the module docstring).

    Args:
      run: the run name (the resource's ``workload_id``).
      options: ``GCPOptions`` (this package's or the reference's); copied.
        None: defaults (everything looked up, both metric families on).
      client: a ``MetricServiceClient`` to use (e.g. with a custom
        ``transport=``); not closed by :meth:`close`. None: one is made on
        the first export from ``client_options`` and ``credentials``.
      client_options: passed to ``MetricServiceClient`` (e.g. an endpoint).
      credentials: passed to ``MetricServiceClient`` (None: the defaults).
      include_badput_breakdown: send per-bucket badput series. The reference
        always sends them to Cloud Monitoring (its flag of that name governs
        TensorBoard only); the compat layer should pass True to match.
      include_step_deviation: send ``step_time_deviation`` and ``performance``.
      include_rolling: send the rolling-window series.
      clock: POSIX time now (caps point end times; injectable for tests).
      timeout: seconds per ``create_time_series`` call (the library's default).

    Attributes:
      stats: ``calls``, ``series`` (sent in calls that succeeded),
        ``failed_calls``, ``errors`` (kind -> count).
    """

    name = "gcm"

    def __init__(self, run: str, options: Any = None, *, client: Any = None,
                 client_options: Any = None, credentials: Any = None,
                 include_badput_breakdown: bool = True, include_step_deviation: bool = True,
                 include_rolling: bool = True, clock: Callable[[], float] = time.time,
                 timeout: float = 12.0):
        self._run = str(run)
        # A copy: the reference fills in and disables the caller's (shared
        # default) object; later lookups here must never leak back.
        self._options = copy.copy(options) if options is not None else gcp.GCPOptions()
        self._client = client
        self._owns_client = client is None
        self._client_options = client_options
        self._credentials = credentials
        self._flags = dict(include_badput_breakdown=include_badput_breakdown,
                           include_step_deviation=include_step_deviation,
                           include_rolling=include_rolling)
        self._clock = clock
        self._timeout = timeout
        self._resolved = False
        self._disabled: Optional[str] = None
        self._last_end_ns: Optional[int] = None
        self._logged_kinds: set = set()
        self._failing = 0
        self.stats: Dict[str, Any] = {"calls": 0, "series": 0, "failed_calls": 0,
                                      "errors": collections.Counter()}

    # ------------------------------------------------------------ public
    @property
    def options(self) -> Any:
        """A copy of the options in use (filled in once resolved)."""
        return copy.copy(self._options)

    @property
    def disabled(self) -> Optional[str]:
        """Why the exporter stopped sending for good, or None."""
        return self._disabled

    def export(self, snapshot: MonitorSnapshot) -> None:
        """Writes one snapshot (see the module docstring for the error contract).

        Args:
          snapshot: the cycle's results.
        """
        if self._disabled or not self._ready():
            return
        specs = build_series(snapshot, self._options, **self._flags)
        if not specs:
            return
        end = self._end_time(snapshot.query_time)
        series = [self._to_proto(s, end) for s in specs]
        for i in range(0, len(series), MAX_SERIES_PER_CALL):
            self._send(series[i:i + MAX_SERIES_PER_CALL])

    def close(self) -> None:
        """Closes the client's channel if this exporter made the client."""
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            try:
                client.transport.close()
            except Exception as exc:  # pylint: disable=broad-except
                logger.debug("Cloud Monitoring: closing the client failed (%s)",
                             type(exc).__name__)
        if self._disabled is None:
            self._disabled = "closed"

    # ------------------------------------------------------------ internals
    def _ready(self) -> bool:
        """Resolves options and makes the client on first use; False: skip."""
        opts = self._options
        if not (opts.enable_gcp_goodput_metrics or opts.enable_gcp_step_deviation_metrics):
            return False  # no cloud feature on: no client, no metadata lookups
        if not self._resolved:
            self._resolved = True
            # Here, not in __init__: these may take seconds off Google Cloud
            # and must never run on the training thread. Off Google Cloud
            # (decided from local files) the metadata server is not asked.
            lookups = gcp.metadata_server_expected()
            if lookups and not opts.project_id:
                opts.project_id = gcp.get_gcp_project_id()
            if lookups and not opts.location:
                opts.location = gcp.get_node_zone()
            if not opts.acc_type:
                opts.acc_type = gcp.get_accelerator_type() if lookups else "UNKNOWN"
            if not (opts.project_id and opts.location):
                return self._disable(
                    "project id or location unknown (set GCPOptions.project_id and location)"
                    if lookups else "not on Google Cloud, so no metadata lookups (set "
                    "GCPOptions.project_id and location, or GCE_METADATA_HOST)")
            opts.replica_id = str(opts.replica_id)
            self._resource_labels = {"location": str(opts.location),
                                     "workload_id": self._run,
                                     "replica_id": opts.replica_id}
            self._project_name = f"projects/{opts.project_id}"
        if self._client is None:
            try:
                from google.cloud import monitoring_v3

                self._client = monitoring_v3.MetricServiceClient(
                    credentials=self._credentials, client_options=self._client_options)
            except Exception as exc:  # pylint: disable=broad-except
                # Missing library or credentials do not heal by retrying, and
                # google.auth.default() can probe the network each time.
                return self._disable(f"cannot create the client ({_describe(exc)[0]})")
        return True

    def _disable(self, why: str) -> bool:
        self._disabled = why
        logger.warning("Cloud Monitoring export disabled for run %r: %s", self._run, why)
        return False

    def _end_time(self, query_time: float) -> int:
        """The cycle's end time in ns: the query time, capped at now, and
        strictly after the previous cycle's (all series share it, so this
        keeps every series' points in order)."""
        now = float(self._clock())
        t = float(query_time) if math.isfinite(query_time) else now
        ns = int(round(min(t, now) * 1e9))
        if self._last_end_ns is not None and ns <= self._last_end_ns:
            ns = self._last_end_ns + _BUMP_NS
        self._last_end_ns = ns
        return ns

    def _to_proto(self, spec: Series, end_ns: int) -> Any:
        from google.cloud import monitoring_v3

        metric, labels, value, is_int = spec
        ts = monitoring_v3.TimeSeries()
        ts.metric.type = METRIC_PREFIX + metric
        ts.metric.labels.update(dict(labels))
        ts.resource.type = RESOURCE_TYPE
        ts.resource.labels.update(self._resource_labels)
        seconds, nanos = divmod(end_ns, 1_000_000_000)
        typed = monitoring_v3.TypedValue(int64_value=value) if is_int else \
            monitoring_v3.TypedValue(double_value=value)
        ts.points.append(monitoring_v3.Point(
            interval=monitoring_v3.TimeInterval(end_time={"seconds": seconds, "nanos": nanos}),
            value=typed))
        return ts

    def _send(self, series: List[Any]) -> None:
        """One create_time_series call; failures are logged safely and counted."""
        self.stats["calls"] += 1
        try:
            self._client.create_time_series(name=self._project_name, time_series=series,
                                            timeout=self._timeout)
        except Exception as exc:  # pylint: disable=broad-except
            kind, message = _describe(exc)
            self.stats["failed_calls"] += 1
            self.stats["errors"][kind] += 1
            self._failing += 1
            if kind not in self._logged_kinds:
                self._logged_kinds.add(kind)
                # Status and server message only: no exc_info, no str(exc).
                logger.warning("Cloud Monitoring: create_time_series failed for run %r: %s%s "
                               "(further %s errors are counted, not logged)", self._run, kind,
                               f" {message}" if message else "", kind)
            return
        self.stats["series"] += len(series)
        if self._failing:
            logger.info("Cloud Monitoring: writes succeed again after %d failed calls",
                        self._failing)
            self._failing = 0


def from_settings(run: str, options: Dict[str, Any], **flags: Any) -> CloudMonitoringExporter:
    """The exporter from plain values (a monitor process rebuilds it so):
    ``options`` as the fields of :class:`~goodput_core.gcp.GCPOptions`."""
    return CloudMonitoringExporter(run, gcp.GCPOptions(**options), **flags)


def cli_arguments(parser: Any) -> None:
    """``goodput monitor --gcm [--project P] [--location L] [--accelerator-type T]``."""
    gcm = parser.add_argument_group("Google Cloud Monitoring")
    gcm.add_argument("--gcm", action="store_true", help="also write to Cloud Monitoring")
    gcm.add_argument("--project", help="project id (default: from the metadata server)")
    gcm.add_argument("--location", help="zone or region (default: from the metadata server)")
    gcm.add_argument("--accelerator-type", help="accelerator type label (default: detected)")


def from_cli(args: Any) -> List[Exporter]:
    """The exporter ``--gcm`` asks for (none without it).

    Raises:
      ValueError: its options without ``--gcm``.
    """
    if not args.gcm:
        if args.project or args.location or args.accelerator_type:
            raise ValueError("--project, --location and --accelerator-type go with --gcm")
        return []
    options = gcp.GCPOptions(project_id=args.project, location=args.location,
                             acc_type=args.accelerator_type)
    return [CloudMonitoringExporter(args.run, options)]
