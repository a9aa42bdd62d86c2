"""MaxText's workload heartbeat and performance metrics, through our monitor.

With ``report_heartbeat_metric_for_gcp_monitoring`` or
``report_performance_metric_for_gcp_monitoring`` on, MaxText's
``MetricLogger`` builds ``maxtext.common.gcp_workload_monitor.GCPWorkloadMonitor``
on every process. Its constructor asks the GCE metadata server for the
project and zone (5 s timeouts, 3 retries each) and builds a
``monitoring_v3.MetricServiceClient``, which raises
``DefaultCredentialsError`` where there are no Google credentials: the job
stops before its first step. Its threads then send
``compute.googleapis.com/workload_process/heartbeat`` every
``heartbeat_reporting_interval_in_seconds`` and ``workload/performance``
(each step time MaxText puts in a queue) to Cloud Monitoring.

:func:`arm` (the launcher; the fork helpers' ``create_goodput_recorder``)
patches that class when MaxText imports its module (a post-import hook:
nothing is imported here; at once if it is imported already), so that:

* the constructor looks nothing up and builds no client (no job is stopped
  for want of credentials);
* ``start_heartbeat_reporting_thread(interval)`` records the metric
  ``workload_heartbeat`` (its value: the heartbeat's POSIX time) every
  ``interval`` seconds into the goodput run of this process;
* ``start_performance_reporting_thread(queue)`` drains MaxText's queue on a
  daemon thread and records each step time as ``workload_performance``
  (seconds).

Our monitor publishes both as it publishes every model metric: TensorBoard
``metrics/<name>``, Prometheus ``goodput_metric{name=...}``, OpenTelemetry
(``GOODPUT_OTEL``), ``goodput report``. Only the process with an enabled
goodput recorder (process 0, the one MaxText's goodput recorder writes on)
records (the recorder current when the thread starts: a step time drained
after the job's end still lands in its run); the others drain the queue and
record nothing. Both threads are daemons and never raise. :func:`disarm` puts MaxText's methods back.
"""

from __future__ import annotations

import logging
import queue as _queue
import threading
import time
from typing import Any, Callable, Dict, Optional

from goodput_integrations.maxtext import runtime
from goodput_integrations.maxtext.post_import import ModulePatch

__all__ = ["MODULE", "HEARTBEAT_METRIC", "PERFORMANCE_METRIC", "arm", "disarm"]

logger = logging.getLogger("goodput")

MODULE = "maxtext.common.gcp_workload_monitor"
CLASS = "GCPWorkloadMonitor"
HEARTBEAT_METRIC = "workload_heartbeat"
PERFORMANCE_METRIC = "workload_performance"
_METHODS = ("__init__", "__del__", "start_heartbeat_reporting_thread",
            "start_performance_reporting_thread")
_clock: Callable[[], float] = time.time


def _record(recorder: Any, name: str, value: float, when: float) -> None:
    if recorder is None:
        return
    try:
        recorder.record_metric(name, value, time=when)
    except Exception:  # a metric must never end MaxText's thread
        logger.debug("goodput: recording %s failed", name, exc_info=True)


def _init(self: Any, run_name: str = "", *args: Any, **kwargs: Any) -> None:
    self.workload_id = run_name or "maxtext-unnamed"
    self.heartbeat_reporting_started = False
    self.performance_reporting_started = False
    self.termination_event = threading.Event()


def _del(self: Any) -> None:
    event = getattr(self, "termination_event", None)
    if event is not None:
        event.set()


# The loops hold the monitor itself (not only its event), as MaxText's threads
# do through their bound methods: MaxText 0.2.5 keeps its GCPWorkloadMonitor in
# a local variable, so without that reference the instance is collected as
# soon as the threads start and its __del__ sets the event that stops them.
def _heartbeat_loop(monitor: Any, interval: float, recorder: Any) -> None:
    while True:
        now = _clock()
        _record(recorder, HEARTBEAT_METRIC, now, now)
        if monitor.termination_event.wait(interval):
            return


def _start_heartbeat(self: Any, interval: int) -> None:
    if self.heartbeat_reporting_started:
        raise RuntimeError("Heartbeat reporting thread already started")  # as MaxText
    self.heartbeat_reporting_started = True
    threading.Thread(target=_heartbeat_loop, args=(self, float(interval),
                                                   runtime.current_recorder()),
                     name="goodput-workload-heartbeat", daemon=True).start()
    logger.info("goodput: MaxText's workload heartbeat goes to the goodput run (metric %s)",
                HEARTBEAT_METRIC)


def _performance_loop(monitor: Any, metrics: Any, recorder: Any) -> None:
    while not monitor.termination_event.is_set():
        try:
            step_time = metrics.get(timeout=1.0)
        except _queue.Empty:
            continue
        try:
            value = float(step_time)
        except (TypeError, ValueError):
            continue
        _record(recorder, PERFORMANCE_METRIC, value, _clock())


def _start_performance(self: Any, metrics_queue: Any) -> None:
    if self.performance_reporting_started:
        raise RuntimeError("Performance reporting thread already started")  # as MaxText
    self.performance_reporting_started = True
    threading.Thread(target=_performance_loop, args=(self, metrics_queue,
                                                     runtime.current_recorder()),
                     name="goodput-workload-performance", daemon=True).start()
    logger.info("goodput: MaxText's workload performance goes to the goodput run (metric %s)",
                PERFORMANCE_METRIC)


_OURS: Dict[str, Any] = {"__init__": _init, "__del__": _del,
                         "start_heartbeat_reporting_thread": _start_heartbeat,
                         "start_performance_reporting_thread": _start_performance}


def _patch(module: Any) -> Optional[Callable[[], None]]:
    cls = getattr(module, CLASS, None)
    if not isinstance(cls, type) or getattr(cls, "__goodput_patched__", False):
        return None
    originals = {name: cls.__dict__.get(name) for name in _METHODS}
    for name, fn in _OURS.items():
        setattr(cls, name, fn)
    cls.__goodput_patched__ = True

    def undo() -> None:
        for name, fn in originals.items():
            if fn is None:
                delattr(cls, name)
            else:
                setattr(cls, name, fn)
        del cls.__goodput_patched__
    return undo


_PATCH = ModulePatch(MODULE, _patch)


def arm(clock: Optional[Callable[[], float]] = None) -> None:
    """Patches MaxText's ``GCPWorkloadMonitor`` when its module is imported
    (at once if it is already); idempotent. ``clock``: the metrics' time
    source (tests)."""
    global _clock
    _clock = clock or time.time
    runtime.on_release(disarm)  # the recorder's release puts MaxText's methods back
    _PATCH.arm()


def disarm() -> None:
    """Cancels the hook and puts MaxText's methods back."""
    _PATCH.disarm()
