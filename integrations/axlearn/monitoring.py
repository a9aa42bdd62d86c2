"""The monitors of one AXLearn run, laid out as AXLearn's goodput recorder does.

Cumulative goodput (with the badput breakdown, and step deviation when
asked) goes to TensorBoard under ``{upload_dir}/goodput``; rolling windows
go to a second monitor under ``{upload_dir}/rolling_window_{name}/goodput``;
both through :class:`goodput_core.compat.monitoring.GoodputMonitor`, reading
the run's store. Prometheus, when asked, is served by the first one only.

They are built and started on a thread of their own
(:class:`goodput_core.monitor.background_start.BackgroundStart`): entering
``maybe_monitor_all()`` costs the training thread one thread start
(docs/quality.md P9). A monitor that cannot be built (an unwritable directory, a
port in use) is logged there and the run goes on without it.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from typing import Any, Callable, Dict, Optional

from goodput_core.compat.goodput_utils import GCPOptions
from goodput_core.monitor.background_start import BackgroundStart
from goodput_integrations.axlearn.spec import RecorderSpec

__all__ = ["RunMonitors"]

logger = logging.getLogger("goodput")

_FLUSH_BEFORE_FINAL_UPLOAD_S = 5.0
_START_WAIT_AT_STOP_S = 30.0  # a start still running at stop is waited for this long
_STOPS = (("rolling", "stop_rolling_window_goodput_uploader"),
          ("step_deviation", "stop_step_deviation_uploader"),
          ("goodput", "stop_goodput_uploader"))


def _tensorboard_installed(spec: RecorderSpec) -> bool:
    """Whether tensorboardX imports; if not, one warning now, when the recorder
    is built (the monitors write TensorBoard files: without it there is nothing
    to monitor into, and each start would fail deep in a thread)."""
    try:
        found = importlib.util.find_spec("tensorboardX") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        logger.warning("goodput: tensorboardX is not installed, so run %r is recorded but not "
                       "monitored (no TensorBoard files in %s): pip install "
                       "'goodput-core[axlearn]'", spec.name, spec.upload_dir)
    return found


class RunMonitors:
    """Starts and stops a run's monitors (the caller decides on which process).

    Args:
      spec: the run's recorder spec.
      clock: the time source of the monitors.
    """

    def __init__(self, spec: RecorderSpec, clock: Callable[[], float]):
        self._spec = spec
        self._clock = clock
        self._lock = threading.Lock()
        self._start: Optional[BackgroundStart] = None
        self._usable = not spec.enable_monitoring or _tensorboard_installed(spec)

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._start is not None

    def _monitor(self, tensorboard_dir: str, prometheus: bool) -> Any:
        # lazy: the monitor's modules: only when AXLearn turns monitoring on
        from goodput_core.compat.monitoring import GoodputMonitor

        spec = self._spec
        extra: Dict[str, Any] = {"clock": self._clock}
        if spec.store:
            extra["store"] = spec.store
        if prometheus and spec.prometheus_port is not None:
            extra["prometheus_port"] = spec.prometheus_port
        return GoodputMonitor(
            job_name=spec.name, logger_name=spec.logger_name, tensorboard_dir=tensorboard_dir,
            upload_interval=max(1, spec.upload_interval),  # 0: every second (spec.py)
            monitoring_enabled=True,
            pathway_enabled=spec.pathways, include_badput_breakdown=True,
            include_step_deviation=spec.include_step_deviation,
            configured_ideal_step_time=spec.ideal_step_time,
            step_deviation_interval_seconds=spec.step_deviation_interval,
            gcp_options=GCPOptions(
                enable_gcp_goodput_metrics=spec.enable_gcp_goodput_metrics,
                enable_gcp_step_deviation_metrics=spec.enable_gcp_step_deviation_metrics),
            **extra)

    def start(self) -> None:
        """Builds and starts the monitors on their own thread (no-op while running);
        returns at once. A failure is logged there; what was started is stopped."""
        with self._lock:
            if self._start is None and self._usable:
                self._start = BackgroundStart(f"goodput-monitor-start-{self._spec.name}",
                                              self._build, abandon=_stop_late).begin()

    def _build(self) -> Dict[str, Any]:
        """Runs on the start thread: the monitors, built and started."""
        spec = self._spec
        started: Dict[str, Any] = {}
        try:
            main = self._monitor(spec.upload_dir, prometheus=True)
            main.start_goodput_uploader()
            started["goodput"] = main
            if spec.include_step_deviation:
                main.start_step_deviation_uploader()
                started["step_deviation"] = main
            if spec.rolling_window_size:
                rolling = self._monitor(spec.rolling_window_dir, prometheus=False)
                rolling.start_rolling_window_goodput_uploader(list(spec.rolling_window_size))
                started["rolling"] = rolling
        except BaseException:
            self._stop(started, skip_final_flush=True)
            raise
        logger.info("goodput: monitoring %s to %s", spec.name, spec.upload_dir)
        return started

    def wait_started(self, timeout: Optional[float] = None) -> bool:
        """Waits until the start thread finished; True when monitors are running."""
        start = self._start
        return start is not None and start.wait(timeout) is not None

    def stop(self, flush: Optional[Callable[[float], Any]] = None) -> None:
        """Flushes pending events (``flush(timeout)``), then stops every
        uploader after its final upload; never raises."""
        with self._lock:
            start, self._start = self._start, None
        if start is None:
            return
        started = start.finish(_START_WAIT_AT_STOP_S)
        if not started:
            return
        if flush is not None:
            try:
                flush(_FLUSH_BEFORE_FINAL_UPLOAD_S)
            except Exception:
                logger.warning("goodput: flushing before the final upload failed",
                               exc_info=True)
        self._stop(started)

    @staticmethod
    def _stop(started: Dict[str, Any], skip_final_flush: Optional[bool] = None) -> None:
        for part, method in _STOPS:
            monitor = started.get(part)
            if monitor is not None:
                try:
                    getattr(monitor, method)(skip_final_flush)
                except Exception:
                    logger.warning("goodput: stopping the %s uploader failed", part,
                                   exc_info=True)


def _stop_late(started: Dict[str, Any]) -> None:
    """A start that finished after stop() gave up on it: stop it, no final upload."""
    RunMonitors._stop(started, skip_final_flush=True)
