"""The process's active run and the metric path (one run at a time, as the SDK).

Metrics recorded before any run are kept (at most ``PENDING_MAX``, with
their arrival times) and recorded into the next run, as the SDK's queue
does; beyond that they are dropped and counted. Nothing here raises into
the caller unless the run is ``strict``.
"""

from __future__ import annotations

import atexit
import collections
import enum
import logging
import math
import operator
import sys
import threading
import time
from typing import Any, Dict, Mapping, Optional

from goodput_core import Recorder
from goodput_core.compat.mldiagnostics import _system
from goodput_core.compat.mldiagnostics.custom_types.exceptions import (
    MLRunConfigurationError,
    RecordingError,
)
from goodput_core.compat.mldiagnostics.custom_types.metric_types import MetricType
from goodput_core.compat.mldiagnostics.custom_types.mlrun_types import ConfigDict, RunPhase
from goodput_core.stores import StoreError
from goodput_core.compat.mldiagnostics.system_metrics import SystemMetrics

logger = logging.getLogger("goodput")

PENDING_MAX = 10_000
_SYSTEM_METRICS_STOP_S = 5.0
#: The SDK's system metrics: dropped unless the run has ``log_system_metrics``.
SYSTEM_METRICS = frozenset(m.value for m in MetricType if m.name.startswith(
    ("TPU_", "HBM_", "GPU_", "VRAM_", "HOST_")))
_STEP_MIN, _STEP_MAX = -2**63, 2**63 - 1  # a step the store's 64-bit column holds
_lock = threading.Lock()
_active: Optional["ActiveRun"] = None
_pending: collections.deque = collections.deque()
_counts: Dict[str, int] = collections.Counter()
_warned: set = set()


def _warn_once(key: str, msg: str, *args: Any) -> None:
    """Logs ``msg`` the first time ``key`` is seen (hooks must not flood the logs)."""
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    logger.warning(msg, *args)


def stats() -> Dict[str, int]:
    """Counters of metrics not recorded, by reason (``metrics.stats()``)."""
    return dict(_counts)


def current() -> Optional["ActiveRun"]:
    return _active


def active_run() -> Any:
    """The active run's ``MLRun``, or None."""
    active = _active
    return None if active is None else active.run


_hooks_lock = threading.Lock()
_hooks_installed = False


def install_exit_hooks() -> None:
    """atexit: end the run (job end); sys.excepthook: a crash is a disruption.

    Installed once, at the first run; the previous excepthook is called after ours.
    """
    global _hooks_installed
    with _hooks_lock:
        if _hooks_installed:
            return
        _hooks_installed = True
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        try:
            crashed(exc_type)
        finally:
            previous(exc_type, exc, tb)

    sys.excepthook = hook
    atexit.register(finish)


def metric_name(metric: Any, labels: Any) -> str:
    """The stored name: a MetricType's value (ours or the SDK's own enum,
    when a program imports both) or the string; labels become
    ``name{k=v,...}`` (sorted) so that labelled series stay apart.

    Raises:
      RecordingError: not a MetricType or a non-empty string; labels not a dict.
    """
    if type(metric) is MetricType or (isinstance(metric, enum.Enum)
                                      and isinstance(metric.value, str) and metric.value):
        name = metric.value
    elif isinstance(metric, str) and metric.strip():
        name = metric.strip()
    else:
        raise RecordingError(f"metric_name must be a MetricType or a non-empty string, "
                             f"got {metric!r}")
    if labels:
        if not isinstance(labels, Mapping):
            raise RecordingError(f"labels must be a dict of strings, got {labels!r}")
        name += "{" + ",".join(f"{k}={labels[k]}" for k in sorted(labels, key=str)) + "}"
    return name


def metric_value(value: Any) -> float:
    """A float: numbers and 0-d arrays as they are, lists and tuples by their
    mean (as the SDK). NaN and infinities pass: the engine skips and counts them.

    Raises:
      RecordingError: None, text, a dict, an empty list or anything else
        (the SDK sends text and dicts as log entries: here they are counted
        as ``non_numeric`` by the caller and not recorded).
    """
    if isinstance(value, (list, tuple)):
        if not value:
            raise RecordingError("metric value is an empty list")
        items = [metric_value(v) for v in value]
        return math.fsum(items) / len(items)
    if value is None or isinstance(value, (str, bytes, dict)):
        raise RecordingError(f"metric value must be a number, got {type(value).__name__}")
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise RecordingError(f"metric value must be a number, got {value!r}") from exc


class ActiveRun:
    """One run: its recorder, and the step tracking of ``steps_from_metrics``."""

    def __init__(self, run: Any, recorder: Any, *, lead: bool, steps_from_metrics: bool,
                 record_job: bool, strict: bool):
        self.run = run
        self.recorder = recorder
        self.lead = lead
        self.steps_from_metrics = steps_from_metrics and lead
        self.record_job = record_job and lead
        self.strict = strict
        self.failed = False
        self.hardware_pending = lead
        self._last_step: Optional[int] = None
        self._step_lock = threading.Lock()
        self.xprof_server = False
        self.stop_server: Any = None
        self.system_metrics: Any = None  # the sampler of log_system_metrics

    def record(self, metric: Any, value: Any, step: Any = None, labels: Any = None,
               all_hosts: bool = False, when: Optional[float] = None) -> None:
        """Records one metric point (never raises unless strict)."""
        name = None
        try:
            name = metric_name(metric, labels)
            number = metric_value(value)
        except RecordingError as exc:
            if self.strict:
                raise
            text = name is not None and isinstance(value, (str, bytes, dict))
            _counts["non_numeric" if text else "bad_metric"] += 1
            _warn_once("bad-metric", "goodput: metrics.record: %s; not recorded (further "
                       "ones are counted in metrics.stats())", exc)
            return
        if name in SYSTEM_METRICS and not self.run.log_system_metrics:
            _counts["system_metric"] += 1  # as the SDK: dropped without log_system_metrics
            _warn_once("system-metric", "goodput: metrics.record(%r) dropped: system metrics "
                       "are recorded with machinelearning_run(log_system_metrics=True), as "
                       "the SDK (further ones are counted in metrics.stats())", name)
            return
        if self.hardware_pending:
            self.collect_hardware()
        if self.steps_from_metrics:
            if (step is None and isinstance(metric, enum.Enum) and metric.value == "step"
                    and number.is_integer()):
                step = int(number)
            if step is not None and type(step) is not int and not isinstance(step, bool):
                try:  # numpy and jax integers are steps too
                    step = operator.index(step)
                except TypeError:
                    pass  # the recorder rejects and counts it
            if type(step) is int and not _STEP_MIN <= step <= _STEP_MAX:
                _counts["bad_step"] += 1  # this point alone: later steps still count
                _warn_once("bad-step", "goodput: metrics.record(%r, step=%d): the step is out "
                           "of the 64-bit range; point not recorded", name, step)
                return
            if type(step) is int and (self._last_step is None or step > self._last_step):
                self._mark_step(step, when)
        if self.lead or all_hosts:
            self.recorder.record_metric(name, number, step=step, time=when)

    def _mark_step(self, step: int, when: Optional[float]) -> None:
        with self._step_lock:  # two threads must not start one step twice (a restart)
            if self._last_step is not None and step <= self._last_step:
                return
            self._last_step = step
            self.recorder.record_step_start_time(step, when)

    def collect_hardware(self) -> None:
        """Records the framework's device facts once known (lead only): jax's
        once its backends exist; torch's (``framework=PYTORCH``) at once."""
        # lazy: numpy: importing the SDK stays light
        from goodput_core.queries.diagnostics import jsonable

        if self.run.framework.value == "PYTORCH":
            meta = _system.torch_metadata()
            if not meta:  # not imported yet: asked again at the next metric
                return
        elif "jax" not in sys.modules:  # not a JAX program (jax comes before the run)
            self.hardware_pending = False
            return
        else:
            meta = _system.jax_metadata()
        if not meta:  # backends not up yet: asked again at the next metric
            return
        self.hardware_pending = False
        hardware = _system.hardware_configs(meta)
        if self.run.configs is not None:
            dict.__setitem__(self.run.configs, "hardwareConfigs", hardware)
        try:
            self.recorder.record_metadata(hardware_configs=hardware, **jsonable(meta))
        except Exception:
            _warn_once("hardware", "goodput: recording hardware configs failed")


def _record_start_metadata(active: ActiveRun, configs: Any) -> None:
    """Run metadata of a new run (lead only); bad configs raise MLRunConfigurationError."""
    # lazy: numpy: importing the SDK stays light
    from goodput_core.queries.diagnostics import load_config, record_config

    run, rec = active.run, active.recorder
    try:
        user = {} if configs is None else (
            dict(configs) if isinstance(configs, Mapping) else load_config(configs))
    except (OSError, ValueError, RuntimeError) as exc:
        raise MLRunConfigurationError(f"configs: {exc}") from None
    software = _system.software_configs(run.framework.value)
    # as the SDK, the run's userConfigs are strings; the store keeps the values
    run.configs = ConfigDict({"softwareConfigs": software,
                              "hardwareConfigs": _system.hardware_configs({}),
                              "userConfigs": {str(k): str(v) for k, v in user.items()}})
    if not active.lead:
        return
    fields = {"software_configs": software, "mldiagnostics": {
        "display_name": run.display_name, "gcs_path": run.gcs_path, "project": run.project,
        "region": run.location, "environment": run.environment, "created_at": run.created_at,
        "framework": run.framework.value,
        "application_framework": run.application_framework.value,
        "orchestrator": run.orchestrator.value, "profile_dir": run.profile_dir}}
    if run.run_group:
        fields["run_group"] = run.run_group
    if not isinstance(configs, Mapping) and configs is not None:
        record_config(rec, configs)  # also records config_path
    else:
        record_config(rec, user)
    rec.record_metadata(**fields)
    object.__setattr__(run.configs, "_on_change",
                       lambda cfg: _safe(lambda: record_config(rec, cfg), "configs"))
    active.collect_hardware()


def _safe(fn, what: str) -> None:
    try:
        fn()
    except Exception:
        _warn_once(f"safe-{what}", "goodput: recording %s failed", what)


def start(run: Any, configs: Any, *, store: Any, clock: Any, steps_from_metrics: bool,
          record_job: bool, strict: bool, system_metrics: Any = (0.0, None),
          profiler_server: Any = None) -> Any:
    """Ends the active run, opens the new one, replays pending metrics.

    ``system_metrics``: ``(interval seconds, wait)`` of the sampler a run
    with ``log_system_metrics`` starts on local rank 0 (interval <= 0: none).
    ``profiler_server``: ``(start, stop)`` of the on-demand profiler server
    (``start()`` says whether it started; ``stop()`` runs when the run ends).
    """
    global _active

    finish()
    try:
        recorder = Recorder(run.name, store, clock=clock, process_index=run.process_index)
    except (StoreError, ValueError) as exc:
        raise MLRunConfigurationError(f"store: {exc}") from None
    run.recorder = recorder
    run.store = getattr(recorder._store, "url", None)
    active = ActiveRun(run, recorder, lead=run.process_index == 0,
                       steps_from_metrics=steps_from_metrics, record_job=record_job,
                       strict=strict)
    try:
        if active.record_job:
            recorder.record_job_start_time()
        _record_start_metadata(active, configs)
    except Exception:
        recorder.close()
        raise
    install_exit_hooks()
    with _lock:
        _active = active
        pending = list(_pending)
        _pending.clear()
    for args in pending:
        active.record(*args)
    _start_system_metrics(active, clock, *system_metrics)
    if profiler_server is not None and run.on_demand_xprof and not run.metric_only_run:
        start_server, active.stop_server = profiler_server
        active.xprof_server = start_server()
    logger.info("goodput: MLRun %r created (store %s, profiles in %s)", run.name, run.store,
                run.profile_dir)
    return run


def _start_system_metrics(active: ActiveRun, clock: Any, interval: float, wait: Any) -> None:
    """As the SDK: the local master process of each host samples system
    metrics when the run has ``log_system_metrics`` and a positive interval."""
    if not active.run.log_system_metrics or not interval > 0 or _system.local_rank() != 0:
        return

    active.system_metrics = SystemMetrics(active.recorder, interval_s=interval,
                                          process_index=active.run.process_index,
                                          clock=clock, wait=wait).start()


def record_or_keep(metric: Any, value: Any, step: Any, labels: Any, all_hosts: bool) -> None:
    """Records into the active run, or keeps the point for the next run."""
    active = _active
    if active is not None:
        active.record(metric, value, step, labels, all_hosts)
        return
    with _lock:
        active = _active
        full = active is None and len(_pending) >= PENDING_MAX
        if active is None and not full:
            _pending.append((metric, value, step, labels, all_hosts, time.time()))
            return
        if full:
            _counts["dropped_before_run"] += 1
    if full:
        _warn_once("pending", "goodput: more than %d metrics recorded before "
                   "machinelearning_run; dropping (counted in metrics.stats())", PENDING_MAX)
        return
    active.record(metric, value, step, labels, all_hosts)


def crashed(exc_type: Any) -> None:
    """An unhandled exception: the run failed (a disruption; no job end at exit)."""
    active = _active
    if active is None or active.failed:
        return
    active.failed = True
    active.run.run_phase = RunPhase.PHASE_FAILED
    if active.record_job:
        _safe(lambda: active.recorder.record_disruption(
            f"exception:{getattr(exc_type, '__name__', exc_type)}"), "disruption")
    active.recorder.flush(10.0)


def finish() -> None:
    """Ends the active run (job end unless it failed), flushes, stops the server."""
    global _active
    with _lock:
        active, _active = _active, None
    if active is None:
        return
    if active.record_job and not active.failed:
        _safe(active.recorder.record_job_end_time, "job end")
        active.run.run_phase = RunPhase.PHASE_COMPLETED
    if active.xprof_server:
        active.stop_server()
    if active.system_metrics is not None:
        active.system_metrics.stop(_SYSTEM_METRICS_STOP_S)
    active.recorder.close()
