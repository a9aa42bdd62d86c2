"""MaxText's goodput helper API on our engine.

MaxText drives goodput through a handful of helpers (``maxtext.common.goodput``
in MaxText 0.2.4-0.2.5). This module offers the same names and call shapes,
driven by the same config flags; a fork serves them to all of MaxText's
importers through :mod:`goodput_integrations.maxtext.fork`. As MaxText's
``train.py`` uses them::

    recorder = create_goodput_recorder(config)       # None unless enabled
    record_goodput(recorder, RECORD_JOB_START_TIME)
    with maybe_monitor_goodput(config):              # process 0 only
        with maybe_record_goodput(recorder, GoodputEvent.TPU_INIT):
            ...
        for step in range(start_step, config.steps):
            with maybe_record_goodput(recorder, GoodputEvent.STEP, step):
                state, metrics = p_train_step(state, batch)
        record_goodput(recorder, RECORD_JOB_END_TIME)  # graceful end only

Differences from MaxText's helpers (all deliberate):

* Events go to our store (``$GOODPUT_STORE``; default the embedded sqlite
  file), not to Cloud Logging, unless the store is ``cloud-logging://...``.
  Our settings come from ``GOODPUT_*`` variables (MaxText's config rejects
  unknown keys), or from a config object that has the ``goodput_*`` key.
* ``monitor_step_time_deviation`` starts the step-deviation uploader (MaxText
  passes the flag to the monitor but never starts that uploader), and
  ``enable_rolling_window_goodput`` / ``rolling_windows_seconds`` (newer
  MaxText) or ``goodput_rolling_windows`` start the rolling-window uploader,
  in newer MaxText's order (started after the cumulative one, stopped
  before it; failures to start or stop it are logged, never raised).
* Crashes and preemptions are disruptions. :func:`create_goodput_recorder`
  installs the JAX adapter's SIGTERM handler and excepthook
  (:mod:`~goodput_integrations.maxtext.runtime`): SIGTERM records
  ``disruption_cause: sigterm``, an uncaught exception ``exception:<Type>``.
  A ``GoodputEvent.JOB`` block that raises records the same at once (current
  MaxText uses no JOB block: it records job start, and job end only when the
  run completed gracefully). Like MaxText, no job end is recorded then.
* Orbax checkpoint save/restore statistics are recorded: the recorder
  arms a hook that adds our logger to every Orbax checkpointer built once
  MaxText imports Orbax (``GOODPUT_CHECKPOINT_STATS=false``: off), and JAX
  compilations become program-startup spans.
* ``report_performance_metric_for_gcp_monitoring`` turns step-deviation
  metrics to Cloud Monitoring off, as in MaxText, without writing to the
  config (MaxText's own helper assigns to its read-only config and fails).
* Before the monitor's final upload, pending events of this process are
  flushed, so the last numbers include the job end.
* ``report_heartbeat_metric_for_gcp_monitoring`` /
  ``report_performance_metric_for_gcp_monitoring``: MaxText's
  ``GCPWorkloadMonitor`` is patched when :func:`create_goodput_recorder`
  runs (:mod:`~goodput_integrations.maxtext.workload_monitor`): the
  heartbeat and step times become metrics of the goodput run that our
  monitor publishes, and no job stops for want of Google credentials.
* The whole process is accounted for
  (:mod:`~goodput_integrations.maxtext.whole_process`): the job starts when
  the process started (imports and config as training preparation), and
  the time from the job end to the exit is the custom badput ``SHUTDOWN``.
* ``elastic_enabled`` picks the elastic recorder and monitor, but MaxText's
  own ``elastic_utils.record_slice_state`` is not called (it is MaxText code).
* A ``DATA_LOADING`` block also records the input stall inside it (the part
  of the load with the device idle) when an instrumented JAX adapter tracks
  the train step (``gjax.train_step``); MaxText's own calls carry no step
  outputs, so without it loads keep the positional rule.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
from typing import Any, Iterator, List, Optional, Tuple

from goodput_core.compat.goodput_utils import GCPOptions
from goodput_core.monitor.background_start import BackgroundStart
from goodput_core.record.hooks import flush_all
from goodput_integrations.maxtext import runtime, whole_process, workload_monitor
from goodput_integrations.maxtext.config import MaxTextGoodputSettings, read_settings

__all__ = [
    "GoodputEvent",
    "get_goodput_job_name",
    "RECORD_JOB_END_TIME",
    "RECORD_JOB_START_TIME",
    "create_goodput_recorder",
    "maybe_monitor_goodput",
    "maybe_record_goodput",
    "process_index",
    "record_goodput",
]

logger = logging.getLogger("goodput")

_FLUSH_BEFORE_FINAL_UPLOAD_S = 5.0
_START_WAIT_AT_STOP_S = 30.0  # a monitor start still running at exit is waited for this long
_warned: set = set()


class GoodputEvent(enum.Enum):
    """MaxText's goodput events; each value is spliced into
    ``record_{value}_start_time`` / ``record_{value}_end_time``."""

    JOB = "job"
    TPU_INIT = "tpu_init"
    TRAINING_PREPARATION = "training_preparation"
    DATA_LOADING = "data_loading"
    STEP = "step"


RECORD_JOB_START_TIME = f"record_{GoodputEvent.JOB.value}_start_time"
RECORD_JOB_END_TIME = f"record_{GoodputEvent.JOB.value}_end_time"


def _warn_once(key: str, msg: str, *args: Any) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(msg, *args, exc_info=True)


def process_index(settings: Optional[MaxTextGoodputSettings] = None) -> int:
    """This process's JAX index, as MaxText asks for it (0 without JAX).

    The test hook ``_goodput_process_index`` (an int or a callable) wins.
    Otherwise the index is read without touching a backend when
    ``jax.distributed`` already knows it; else ``jax.process_index()`` is
    called, as MaxText's own helpers do at this point of start-up.
    """
    hook = None if settings is None else settings.process_index
    if hook is not None:
        return int(hook() if callable(hook) else hook)
    try:
        import jax
    except ImportError:
        return 0
    from goodput_integrations.jax import _probe  # lazy: the JAX adapter (numpy): only once JAX runs

    try:
        index = _probe.current_process_index()
        return int(jax.process_index() if index is None else index)
    except Exception:
        _warn_once("maxtext-index", "goodput: could not read the JAX process index; "
                   "assuming process 0")
        return 0


def _clock_kwargs(settings: MaxTextGoodputSettings) -> dict:
    out: dict = {}
    if settings.store is not None:
        out["store"] = settings.store
    if settings.clock is not None:
        out["clock"] = settings.clock
    return out


def get_goodput_job_name(config: Any) -> str:
    """``goodput_job_name`` if set, else ``run_name`` (as MaxText 0.2.5)."""
    return read_settings(config).job_name


def create_goodput_recorder(config: Any) -> Any:
    """The run's recorder if ``enable_goodput_recording``, else None (as MaxText).

    Every process gets a recorder; only process 0's writes (the others are
    disabled null recorders), as in MaxText. ``elastic_enabled`` gives the
    elastic recorder. Process 0's recorder also receives Orbax checkpoint
    statistics and disruptions (SIGTERM, uncaught exception): see
    :mod:`~goodput_integrations.maxtext.runtime`.

    Args:
      config: MaxText's config (or any object/mapping with the flags).

    Returns:
      A :class:`goodput_core.compat.goodput.GoodputRecorder` (or its elastic
      subclass), or None when recording is off.

    Raises:
      ValueError: a bad flag value.
      StoreError: ``goodput_store`` cannot be opened.
    """
    settings = read_settings(config)
    if (settings.report_heartbeat_metric_for_gcp_monitoring
            or settings.report_performance_metric_for_gcp_monitoring):
        workload_monitor.arm(settings.clock)  # MaxText's MetricLogger builds it later
    if not settings.enable_goodput_recording:
        return None
    if settings.elastic_enabled:
        # lazy: numpy: MaxText imports these helpers in every run
        from goodput_core.compat.goodput_elastic import ElasticGoodputRecorder as cls
    else:
        # lazy: numpy: MaxText imports these helpers in every run
        from goodput_core.compat.goodput import GoodputRecorder as cls
    writes = process_index(settings) == 0
    recorder = cls(settings.job_name, settings.logger_name, writes, **_clock_kwargs(settings))
    if writes:
        runtime.track(recorder, checkpoint_stats=settings.checkpoint_stats)
        if settings.system_metrics:
            runtime.sample_system_metrics(recorder, settings.clock)
        if settings.clock is None:  # real time: the process's start is on the same clock
            whole_process.track(recorder, whole_process.process_start_time())
    if settings.run_group:
        recorder.record_metadata(run_group=settings.run_group)
    return recorder


def record_goodput(recorder: Any, event_name: str, *args: Any) -> None:
    """Calls ``recorder.<event_name>(*args)`` if both exist (as MaxText).

    Never raises: a failing call is logged once per method name.
    """
    if not recorder:
        return
    record_func = getattr(recorder, event_name, None)
    if record_func is None:
        return
    try:
        record_func(*args)
    except Exception:
        if getattr(recorder, "_strict", False):
            raise
        _warn_once(f"maxtext-{event_name}", "goodput: %s failed (further failures are "
                   "silent)", event_name)


def _event_value(event: Any) -> str:
    return str(getattr(event, "value", event))


@contextlib.contextmanager
def maybe_record_goodput(recorder: Any, event_name: Any, *args: Any) -> Iterator[None]:
    """Records ``event_name``'s start, runs the block, records its end only
    if the block did not raise (as MaxText).

    Args:
      recorder: a recorder, or None (then nothing is recorded).
      event_name: a :class:`GoodputEvent` (or anything with that ``value``).
      *args: passed to both record calls (the step number for ``STEP``).
    """
    value = _event_value(event_name)
    record_goodput(recorder, f"record_{value}_start_time", *args)
    stall = _observe_load() if value == GoodputEvent.DATA_LOADING.value and recorder else None
    completed = False
    try:
        yield
        completed = True
    except BaseException as exc:  # propagating out of the block: not sys.exc_info()
        if value == GoodputEvent.JOB.value and recorder:
            runtime.record_crash(exc, recorder)
        raise
    finally:
        if completed:
            record_goodput(recorder, f"record_{value}_end_time", *args)
            if stall is not None:
                # lazy: the JAX adapter (numpy): only once JAX runs
                from goodput_integrations.jax.stalls import end_observed_load, record_stall

                end_observed_load(stall, functools.partial(record_stall, recorder))


def _observe_load() -> Any:
    """Input stalls (issue 11): observed through an instrumented JAX adapter
    that tracks the steps; None otherwise (see goodput_integrations.jax.stalls)."""
    try:
        # lazy: the JAX adapter (numpy): only once JAX runs
        from goodput_integrations.jax.stalls import begin_observed_load

        return begin_observed_load()
    except Exception:
        return None


def _gcp_options(settings: MaxTextGoodputSettings) -> Any:
    return GCPOptions(enable_gcp_goodput_metrics=settings.enable_gcp_goodput_metrics,
                      enable_gcp_step_deviation_metrics=settings.gcp_step_deviation_metrics)


def build_monitor(settings: MaxTextGoodputSettings) -> Any:
    """The GoodputMonitor MaxText would build, on our engine (not started).

    Raises:
      ValueError: a bad setting (interval, port).
      StoreError: the store cannot be opened.
    """
    kwargs = dict(
        job_name=settings.job_name,
        logger_name=settings.logger_name,
        tensorboard_dir=settings.tensorboard_dir,
        upload_interval=settings.goodput_upload_interval_seconds,
        monitoring_enabled=True,
        include_badput_breakdown=True,
        include_step_deviation=settings.monitor_step_time_deviation,
        configured_ideal_step_time=settings.ideal_step_time,
        step_deviation_interval_seconds=settings.step_deviation_interval_seconds,
        gcp_options=_gcp_options(settings),
        prometheus_port=settings.prometheus_port,
        **_clock_kwargs(settings),
    )
    if settings.elastic_enabled:
        # lazy: numpy: MaxText imports these helpers in every run
        from goodput_core.compat.monitoring_elastic import ElasticGoodputMonitor

        return ElasticGoodputMonitor(**kwargs)
    # lazy: numpy: MaxText imports these helpers in every run
    from goodput_core.compat.monitoring import GoodputMonitor

    return GoodputMonitor(pathway_enabled=settings.enable_pathways_goodput, **kwargs)


@contextlib.contextmanager
def maybe_monitor_goodput(config: Any) -> Iterator[Optional[Any]]:
    """Monitors goodput in the background if ``monitor_goodput``, on process 0.

    Cumulative goodput (and badput breakdown) every
    ``goodput_upload_interval_seconds`` to TensorBoard under
    ``{tensorboard_dir}/goodput`` and, unless switched off, to Cloud
    Monitoring; step deviation when ``monitor_step_time_deviation``; rolling
    windows when ``enable_rolling_window_goodput`` (``rolling_windows_seconds``,
    as newer MaxText) or ``goodput_rolling_windows``, started after the
    cumulative uploader (a failure to start them is one warning); Prometheus
    when ``goodput_prometheus_port``. On exit: pending events are flushed,
    then the rolling-window uploader stops before the cumulative one, each
    with its final upload (bounded; a failure to stop one is one warning and
    the next still stops); an exception from the block propagates.

    The monitor is built and started on a thread of its own (imports,
    directories, the store): entering the block costs the training thread
    one thread start (docs/quality.md P9). A monitor that cannot be built is
    logged there and training goes on without it.

    Yields:
      A :class:`goodput_core.monitor.background_start.BackgroundStart` whose
      ``wait(timeout)`` returns the started monitor (None if it failed), or
      None when not monitoring.

    Raises:
      ValueError: a bad flag value (before the block runs).
    """
    settings = read_settings(config)
    if not settings.monitor_goodput or process_index(settings) != 0:
        yield None
        return

    start = BackgroundStart(f"goodput-monitor-start-{settings.job_name}",
                            lambda: _start_monitor(settings),
                            abandon=lambda pair: stop_monitor(*pair, flush=False)).begin()
    try:
        yield _MonitorStart(start)
    finally:
        pair = start.finish(_START_WAIT_AT_STOP_S)
        if pair is not None:
            stop_monitor(*pair)


class _MonitorStart:
    """What ``maybe_monitor_goodput`` yields: ``wait(timeout)`` gives the monitor."""

    def __init__(self, start: Any):
        self._start = start

    def wait(self, timeout: Optional[float] = None) -> Optional[Any]:
        """The started monitor (waits up to ``timeout`` s); None if it failed."""
        pair = self._start.wait(timeout)
        return None if pair is None else pair[0]


def _start_monitor(settings: MaxTextGoodputSettings) -> Tuple[Any, List[str]]:
    """Runs on the start thread: builds the monitor and starts its uploaders."""
    monitor = build_monitor(settings)
    started: List[str] = []
    try:
        monitor.start_goodput_uploader()
        started.append("goodput")
        if settings.monitor_step_time_deviation:
            monitor.start_step_deviation_uploader()
            started.append("step_deviation")
    except BaseException:
        stop_monitor(monitor, started, flush=False)
        raise
    windows = settings.monitor_rolling_windows
    if windows:  # after the cumulative uploader, as newer MaxText; a failure is one warning
        try:
            monitor.start_rolling_window_goodput_uploader(list(windows))
            started.append("rolling")
        except Exception:
            _warn_once("maxtext-start-rolling", "goodput: the rolling-window uploader did not "
                       "start; cumulative goodput goes on")
    logger.info("goodput: monitoring %s to %s", settings.job_name, settings.tensorboard_dir)
    return monitor, started


def stop_monitor(monitor: Any, started: Any, flush: bool = True) -> None:
    """Flushes this process's recorders, then stops the started uploaders
    (each with its final upload; neither when ``flush`` is False); never raises."""
    if flush:
        try:
            flush_all(_FLUSH_BEFORE_FINAL_UPLOAD_S)
        except Exception:
            _warn_once("maxtext-flush", "goodput: flushing before the final upload failed")
    stops = {"rolling": "stop_rolling_window_goodput_uploader",
             "step_deviation": "stop_step_deviation_uploader",
             "goodput": "stop_goodput_uploader"}
    for part in ("rolling", "step_deviation", "goodput"):
        if part in started:
            try:
                getattr(monitor, stops[part])(*(() if flush else (True,)))
            except Exception:
                _warn_once(f"maxtext-stop-{part}", "goodput: stopping the %s uploader failed",
                           part)
