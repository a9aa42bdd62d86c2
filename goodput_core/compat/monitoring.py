"""Drop-in replacement for ``ml_goodput_measurement.monitoring`` (0.2.3).

Change ``from ml_goodput_measurement import monitoring`` to
``from goodput_core.compat import monitoring``: :class:`GoodputMonitor` keeps
the reference's constructor (names, positional order, defaults) and its
``start_*`` / ``stop_*`` methods, and writes the same TensorBoard tags into
``<tensorboard_dir>/goodput`` (see :mod:`goodput_core.exporters.tensorboard`).

How it differs from the reference:

* One monitor (a :class:`~goodput_core.monitor.Monitor`, in one monitor
  process, or on one daemon thread where it cannot run in a process)
  instead of one process per uploader, reading the store incrementally;
  each uploader is a *part* of its cycles, on its own interval
  (``upload_interval``, ``step_deviation_interval_seconds``).
* ``step_deviation`` is written once per step, not rewritten every cycle.
* Rolling windows are also written to TensorBoard (``goodput/rolling_<N>s``),
  and so are program goodput and model metrics when the run has them
  (``goodput/program_goodput``, ``goodput/ml_productivity_goodput``,
  ``metrics/<name>``; see :mod:`goodput_core.exporters.tensorboard`).
* Events are read from our store (``store=``: URL, path or Store; default
  the embedded one), not from Cloud Logging unless the store is one.
* ``gcp_options`` defaults to None (a fresh ``GCPOptions()`` each time; the
  reference shares one mutable default and fills it in), and the object
  passed is copied, never modified. Cloud Monitoring is created lazily on
  the monitor's thread (metadata lookups never block the caller); if it
  cannot be imported or created, that is logged once and the rest goes on.
* A hung or failing exporter never blocks the others or the stop; every
  ``stop_*`` returns within ``final_flush_timeout_seconds`` (None: unbounded).
* ``stop_step_deviation_uploader()`` flushes step deviations only when
  ``include_step_deviation`` is True (the reference flushes them anyway).
* ``pathway_enabled``, ``gcs_sync_interval_seconds``, ``cache_dir`` and
  ``max_logs_retention_period`` are accepted and ignored: there is no
  cache file to keep or sync, and a store keeps every event.
* Extra keyword-only arguments: ``store``, ``clock``, ``wait`` (see
  :class:`~goodput_core.monitor.Monitor`), ``prometheus_port`` (serve
  Prometheus metrics on 127.0.0.1:<port>; 0 picks a free port) and
  ``exporters`` (more exporters).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import logging
import threading
import time
from typing import Any, Callable, Iterable, List, Optional

from goodput_core.compat._badput import BadputType
from goodput_core.compat import goodput_utils
from goodput_core.compat.goodput import GoodputCalculator  # noqa: F401  (the reference's name here)
from goodput_core.compat.goodput_utils import (  # noqa: F401  (reached as monitoring.X)
    IntervalMetricType,
    IntervalWorkloadMetricDetails,
    MetricType,
    MonitoringWindowType,
    WorkloadMetricDetails,
)
from goodput_core.exporters import registry as exporter_registry
from goodput_core.exporters.base import Exporter
from goodput_core.monitor import Monitor
from goodput_core.monitor.placement import child_spec
from goodput_core.stores import open_store

__all__ = ["BadputType", "GCPOptions", "GoodputMonitor"]

logger = logging.getLogger(__name__)

GCPOptions = goodput_utils.GCPOptions
_PROCESS_TERMINATION_TIMEOUT_SECONDS = 10
_TENSORBOARD_GCS_SUBDIR = "goodput"
_TENSORBOARD_GOODPUT_LABEL = "goodput"
_TENSORBOARD_BADPUT_LABEL = "badput"
_TENSORBOARD_STEP_DEVIATION_LABEL = "step_deviation"
_DEL_STOP_TIMEOUT_S = 1.0
_GCM_FAMILIES = dict(include_badput_breakdown=True, include_step_deviation=True)


class GoodputMonitor:
    """Queries goodput and uploads it to TensorBoard (and Cloud Monitoring,
    Prometheus) at a regular interval.

    Args:
      job_name: the run to monitor.
      logger_name: the reference's Cloud Logging log name (kept as an attribute).
      tensorboard_dir: TensorBoard data goes to ``<tensorboard_dir>/goodput``.
      upload_interval: seconds between goodput (and rolling window) uploads.
      monitoring_enabled: False (the default) makes every method a no-op.
      pathway_enabled: accepted for compatibility.
      include_badput_breakdown: also write ``badput/...`` to TensorBoard.
      include_step_deviation: allow the step deviation uploader.
      configured_ideal_step_time: the ideal step time (default: computed).
      step_deviation_interval_seconds: seconds between step deviation uploads.
      gcp_options: Cloud Monitoring options (None: ``GCPOptions()``); copied.
      skip_final_flush: the ``stop_*`` methods skip their final upload.
      final_flush_timeout_seconds: the deadline of each ``stop_*`` (None: none).
      gcs_sync_interval_seconds, cache_dir, max_logs_retention_period:
        accepted for compatibility.
      store: where events are read (URL, path or Store; None: the default).
      clock: the time source (tests inject a fake).
      wait: the loop's wait function (see :class:`~goodput_core.monitor.Monitor`).
      prometheus_port: serve Prometheus metrics on this port (None: off).
      exporters: more exporters to call every cycle.

    Raises:
      StoreError: the store cannot be opened.
      ValueError: a bad interval or Prometheus port.
    """

    # Slice efficiency is published by the elastic monitor only, when asked
    # (the reference's plain monitor has no such metric).
    _include_slice_efficiency = False

    def __init__(
        self,
        job_name: str,
        logger_name: str,
        tensorboard_dir: str,
        upload_interval: int,
        monitoring_enabled: bool = False,
        pathway_enabled: bool = False,
        include_badput_breakdown=False,
        include_step_deviation=False,
        configured_ideal_step_time=None,
        step_deviation_interval_seconds=10,
        gcp_options: Optional[GCPOptions] = None,
        skip_final_flush: bool = False,
        final_flush_timeout_seconds: Optional[float] = _PROCESS_TERMINATION_TIMEOUT_SECONDS,
        gcs_sync_interval_seconds: int = 3600,
        cache_dir: str = "/tmp",
        max_logs_retention_period: Optional[datetime.timedelta] = None,
        *,
        store: Any = None,
        clock: Callable[[], float] = time.time,
        wait: Optional[Callable[[float], Any]] = None,
        prometheus_port: Optional[int] = None,
        exporters: Optional[Iterable[Exporter]] = None,
    ):
        if not monitoring_enabled:
            logger.info("Monitoring is disabled. GoodputMonitor will not be initialized.")
            self._initialized = False
            return
        # lazy: the calculator's modules, on construction: importing this module stays light
        from goodput_core.queries.calculator import Calculator

        self.job_name = job_name
        self.logger_name = logger_name
        self.tensorboard_dir = tensorboard_dir
        self._upload_interval = upload_interval
        self._step_interval = step_deviation_interval_seconds
        self._include_badput_breakdown = bool(include_badput_breakdown)
        self._include_step_deviation = bool(include_step_deviation)
        # the reference treats a falsy configured value as "not configured"
        self._ideal = configured_ideal_step_time or None
        self._gcp_options = (GCPOptions() if gcp_options is None else copy.copy(gcp_options))
        self._skip_final_flush = bool(skip_final_flush)
        self._final_flush_timeout_seconds = final_flush_timeout_seconds
        self._clock = clock
        self._wait = wait
        self._prometheus_port = prometheus_port
        self._extra_exporters = list(exporters or ())
        self._otel = exporter_registry.otel_from_env()  # a bad GOODPUT_OTEL fails here, at construction
        self._rolling_windows: List[Any] = []
        self._gcm_failed = False
        self._lock = threading.RLock()
        self._store = store
        self._calculator = Calculator(job_name, _open(store), clock=clock, liveness=False)
        # built now so that bad settings (directory, port) fail here, as in the reference
        self._monitor: Optional[Monitor] = self._new_monitor()
        self._initialized = True

    # ----------------------------------------------------------- plumbing
    @property
    def monitor(self) -> Optional[Monitor]:
        """The engine monitor now in use (None when disabled or fully stopped)."""
        return getattr(self, "_monitor", None)

    def _new_monitor(self) -> Monitor:
        kinds = exporter_registry.EXPORTERS
        exporters: List[Any] = [kinds["tensorboard"].build(
            self.tensorboard_dir, subdir=_TENSORBOARD_GCS_SUBDIR,
            include_badput_breakdown=self._include_badput_breakdown)]
        opts = self._gcp_options
        if (opts.enable_gcp_goodput_metrics or opts.enable_gcp_step_deviation_metrics) \
                and not self._gcm_failed:  # a failure is reported once per GoodputMonitor
            # the reference always sends the badput breakdown to Cloud Monitoring
            # (its flag governs TensorBoard only); the options gate each family
            exporters.append(exporter_registry.lazy(
                "gcm", factory=self._make_gcm, on_failure=self._gcm_failure,
                run=self.job_name, options=dataclasses.asdict(self._gcp_options),
                **_GCM_FAMILIES))
        if self._prometheus_port is not None:
            exporters.append(kinds["prometheus"].build(self._prometheus_port))
        for kind in self._otel:  # GOODPUT_OTEL: built on the monitor's exporter thread
            exporters.append(exporter_registry.lazy(kind.name))
        exporters.extend(self._extra_exporters)
        # in a monitor process when it can run in one (as Monitor decides: not
        # with an injected clock or wait, a memory store...); else on a thread
        # here, reading through our calculator

        here = child_spec(None, self.job_name, self._store, exporters, options={},
                          custom=self._clock is not time.time or self._wait is not None) is None
        return Monitor(
            self.job_name, self._store, exporters=exporters,
            calculator=self._calculator if here else None,
            interval_s=self._upload_interval, step_deviation_interval_s=self._step_interval,
            include_goodput=False, include_step_deviation=False, liveness=False,
            configured_ideal_step_time=self._ideal,
            clock=self._clock, wait=self._wait,
            final_flush_timeout_s=self._final_flush_timeout_seconds,
            skip_final_flush=self._skip_final_flush,
            include_slice_efficiency=self._include_slice_efficiency,
            include_insights=False)  # the reference's output, tag for tag

    def _gcm_failure(self) -> None:
        self._gcm_failed = True

    def _make_gcm(self) -> Exporter:
        return exporter_registry.EXPORTERS["gcm"].build(
            self.job_name, copy.copy(self._gcp_options), **_GCM_FAMILIES)

    def _ensure_monitor(self) -> Monitor:
        if self._monitor is None:  # every uploader was stopped: start afresh
            self._monitor = self._new_monitor()
        return self._monitor

    def _start_part(self, part: str, what: str, **settings: Any) -> None:
        with self._lock:
            monitor = self._ensure_monitor()
            if part in monitor.parts:
                logger.warning("%s uploader is already running.", what)
                return
            monitor.configure(**settings)
            monitor.start()
            logger.info("%s uploader started for job: %s", what, self.job_name)

    def _stop_part(self, part: str, skip_final_flush: Optional[bool], flushable: bool) -> None:
        should_skip = self._skip_final_flush if skip_final_flush is None else skip_final_flush
        timeout = self._final_flush_timeout_seconds
        # one deadline for the final upload and the stop: the whole call keeps
        # within final_flush_timeout_seconds, whatever a collector does
        deadline = None if timeout is None else time.monotonic() + timeout
        left = lambda: None if deadline is None else max(0.0, deadline - time.monotonic())  # noqa: E731
        with self._lock:
            monitor = self._ensure_monitor()
            if not should_skip and flushable:
                # a final upload whether or not the uploader ran (as the reference)
                if not monitor.flush(left(), parts={part}):
                    logger.warning("Final %s upload for job %s did not complete within %s "
                                   "seconds; abandoned.", part, self.job_name, timeout)
            if part == "rolling":
                monitor.configure(rolling_windows=())
            else:
                monitor.configure(**{part: False})
            if not monitor.parts:
                monitor.stop(left(), skip_final_flush=True)
                self._monitor = None

    # -------------------------------------------------------------- public
    def start_goodput_uploader(self):
        """Starts uploading cumulative goodput every ``upload_interval`` seconds."""
        if not self._initialized:
            return
        self._start_part("goodput", "Cumulative goodput", goodput=True)

    def stop_goodput_uploader(self, skip_final_flush: Optional[bool] = None):
        """Stops the goodput uploader after a final upload (unless skipped)."""
        if not self._initialized:
            return
        self._stop_part("goodput", skip_final_flush, True)

    def start_step_deviation_uploader(self):
        """Starts uploading step deviations (needs ``include_step_deviation``)."""
        if not self._initialized or not self._include_step_deviation:
            logger.info("Step deviation monitoring is disabled. Returning without initializing "
                        "step deviation uploader thread.")
            return
        self._start_part("step_deviation", "Step deviation", step_deviation=True)

    def stop_step_deviation_uploader(self, skip_final_flush: Optional[bool] = None):
        """Stops the step deviation uploader after a final upload (unless skipped)."""
        if not self._initialized:
            return
        self._stop_part("step_deviation", skip_final_flush, self._include_step_deviation)

    def start_rolling_window_goodput_uploader(self, rolling_windows_seconds: list[int]):
        """Starts uploading the goodput of windows of these sizes (seconds)
        ending now, every ``upload_interval`` seconds."""
        if not self._initialized:
            return
        with self._lock:
            monitor = self._ensure_monitor()
            if "rolling" not in monitor.parts:
                self._rolling_windows = list(rolling_windows_seconds)
            self._start_part("rolling", "Rolling window goodput",
                             rolling_windows=self._rolling_windows)

    def _set_rolling_windows(self, rolling_windows_seconds: list) -> bool:
        """Ours (the MaxText alias): a running rolling-window uploader uploads
        these windows from now on. False when it is not running."""
        if not self._initialized:
            return False
        with self._lock:
            monitor = self._monitor
            if monitor is None or "rolling" not in monitor.parts:
                return False
            self._rolling_windows = list(rolling_windows_seconds)
            monitor.configure(rolling_windows=self._rolling_windows)
            return True

    def stop_rolling_window_goodput_uploader(self, skip_final_flush: Optional[bool] = None):
        """Stops the rolling window uploader after a final upload (unless skipped)."""
        if not self._initialized:
            return
        self._stop_part("rolling", skip_final_flush, bool(self._rolling_windows))

    def __del__(self):
        # best effort, no final upload: an unreferenced monitor must not keep a thread
        monitor = getattr(self, "_monitor", None)
        if getattr(self, "_initialized", False) and monitor is not None:
            try:
                monitor.stop(_DEL_STOP_TIMEOUT_S, skip_final_flush=True)
            except Exception:  # noqa: BLE001 - never raise from a finalizer
                pass


def _open(store: Any) -> Any:
    return open_store(store)
