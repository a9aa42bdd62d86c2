"""Drop-in replacement for ``ml_goodput_measurement.goodput``.

Change ``from ml_goodput_measurement import goodput`` to
``from goodput_core.compat import goodput``; the classes keep their names,
signatures, positional order and defaults. Differences: events go to the
embedded store by default (pass ``store=`` for another, e.g.
``cloud-logging://PROJECT/LOG``), recording never blocks the caller, and a
recorder built with ``logging_enabled=False`` is a null object.

:class:`GoodputCalculator` returns the reference's tuples and dicts, but its
numbers are the engine's (the rules of ``docs/semantics.md``); every case where
they differ from the reference is listed, with its test, in
``docs/differences.md``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from goodput_core import events as _events
from goodput_core.compat import _calculator_shapes as _shapes
# Names the reference's module imports from its goodput_utils, and users reach
# through it (``goodput.BadputType``): the same objects here.
from goodput_core.compat.goodput_utils import (  # noqa: F401
    BadputType,
    GoodputInfo,
    GoodputType,
    IntervalMetricType,
    IntervalWorkloadMetricDetails,
    MetricType,
    StepInfo,
    WorkloadMetricDetails,
    compute_ideal_step_time,
    get_extra_time_from_anomalous_steps,
    get_timestamp_from_log_entry,
)
from goodput_core.record.recorder import Recorder
from goodput_core.queries.results import GoodputResult

__all__ = ["GoodputCalculator", "GoodputRecorder"]

logger = logging.getLogger(__name__)

# Payload-key constants of the reference module (de-facto public names).
_JOB_NAME = _events.JOB_NAME
_STEP_COUNT = _events.STEP_COUNT
_STEP_START_TIME = "step_start_time"
_JOB_START_TIME = "job_start_time"
_JOB_END_TIME = "job_end_time"
_TPU_INIT_START_TIME = "tpu_init_start_time"
_TPU_INIT_END_TIME = "tpu_init_end_time"
_TRAINING_PREPARATION_START_TIME = "training_prep_start_time"
_TRAINING_PREPARATION_END_TIME = "training_prep_end_time"
_DATA_LOADING_START_TIME = "data_loading_start_time"
_DATA_LOADING_END_TIME = "data_loading_end_time"
_CUSTOM_BADPUT_EVENT_TYPE = _events.CUSTOM_BADPUT_EVENT_TYPE
_CUSTOM_BADPUT_EVENT_START_TIME = "custom_badput_event_start_time"
_CUSTOM_BADPUT_EVENT_END_TIME = "custom_badput_event_end_time"


class GoodputRecorder(Recorder):
    """The reference's recorder on our engine.

    Args:
      job_name: the run name.
      logger_name: the reference's Cloud Logging log name; kept as an
        attribute and used by the cloud-logging store, ignored by embedded ones.
      logging_enabled: False (the reference's default) records nothing; set
        it True on the one process that should write.
      cloud_logger: a duck-typed object with ``write_cloud_logging_entry``:
        each payload is handed to it synchronously, as in the reference.
      background_grace_period_s: accepted for compatibility (the exit hook
        flushes with its own deadline).
      background_batch_size: accepted for compatibility.
      background_max_latency_s: the longest an event waits before the
        background writer stores it.
      store: where events go (URL, path or Store); default embedded sqlite.
      clock: the time source (tests inject a fake).
      strict: raise on misuse instead of counting and dropping.
    """

    def __init__(
        self,
        job_name: str,
        logger_name: str,
        logging_enabled=False,
        cloud_logger: Any = None,
        *,
        background_grace_period_s: float = 5.0,
        background_batch_size: int = 100,
        background_max_latency_s: float = 2.0,
        store: Any = None,
        clock: Callable[[], float] = time.time,
        strict: bool = False,
        **kwargs: Any,
    ):
        self.logger_name = logger_name
        self.logging_enabled = bool(logging_enabled)
        super().__init__(
            job_name,
            store,
            clock=clock,
            strict=strict,
            flush_interval_s=min(float(background_max_latency_s), 0.5),
            cloud_logger=cloud_logger,
            enabled=self.logging_enabled,
            **kwargs,
        )


class GoodputCalculator:
    """The reference's calculator on our engine.

    Same constructor and methods as ``ml_goodput_measurement``'s
    ``GoodputCalculator`` (0.2.3), same return shapes and units: goodput and
    breakdowns in percent of total time, ``get_job_goodput_details`` in
    seconds. The numbers follow semantics.md (see docs/differences.md).

    Events are read incrementally: from ``cloud_logger`` when one is given
    (the reference's ``read_cloud_logging_entries`` contract, with its
    ``last_entry_info`` cursor), else from ``store`` (our stores' cursor).
    Nothing is cached on disk, so there is no stale cache to reuse.

    Args:
      job_name: the run name.
      logger_name: the reference's Cloud Logging log name; kept as an
        attribute (choose a Cloud Logging log with ``store=`` instead).
      cloud_logger: a duck-typed reader with ``read_cloud_logging_entries``.
      using_pathways: kept as an attribute; it changes nothing here either.
      max_logs_retention_period: accepted and ignored (only the reference's
        own Cloud Logging reader uses it; a store keeps everything).
      gcs_path: accepted and ignored (there is no local cache file to sync).
      cache_dir: accepted and ignored (no cache files are written).
      store: where events are read when no ``cloud_logger`` is given (URL,
        path or Store; None: the default store).
      clock: returns the query time as POSIX seconds (the reference reads
        ``datetime.now(utc)``); tests inject a fake.

    Raises:
      StoreError: the store cannot be opened.
    """

    # Elastic calculators always report the three elastic buckets.
    _elastic = False

    def __init__(
        self,
        job_name: str,
        logger_name: str,
        cloud_logger: Any = None,
        using_pathways: bool = False,
        max_logs_retention_period: Any = None,
        gcs_path: Optional[str] = None,
        cache_dir: str = "/tmp",
        *,
        store: Any = None,
        clock: Callable[[], float] = time.time,
    ):
        del max_logs_retention_period, gcs_path, cache_dir  # see the docstring
        self.job_name = job_name
        self.logger_name = logger_name
        self.using_pathways = using_pathways
        self._clock = clock
        # Imported here: recorders (built at a job's start) do not pay for it.
        # lazy: the calculator's modules: a recorder alone never reads
        from goodput_core.queries.calculator import Calculator

        self._calc = Calculator(job_name, clock=clock, liveness=False)  # rule 1, as the reference
        self._feed = (_shapes.CloudLoggerFeed(job_name, cloud_logger) if cloud_logger is not None
                      else _shapes.StoreFeed(job_name, store))
        self._lock = threading.RLock()
        # What get_job_goodput_details reports: the last cumulative result and
        # the last step statistics, each cached by the call that made it, as
        # the reference's GoodputCache does.
        self._result: Optional[GoodputResult] = None
        self._deviations: Dict[int, float] = {}
        self._ideal: Optional[float] = None

    # ------------------------------------------------------------ reading
    def _pull(self) -> float:
        """Reads what is new; returns the query time (the clock, read once)."""
        now = float(self._clock())
        self._feed.pull(self._calc, now)
        return now

    def sync_to_gcs(self) -> None:
        """Accepted for compatibility: nothing is cached, nothing to sync."""

    # ------------------------------------------------------------ queries
    def get_job_goodput(self, include_badput_breakdown: bool = False,
                        configured_ideal_step_time: Optional[float] = None
                        ) -> Tuple[float, _shapes.Breakdown, int]:
        """Cumulative goodput of the job at the query time (``clock()``).

        Args:
          include_badput_breakdown: also return the badput breakdown.
          configured_ideal_step_time: the ideal step time (seconds) for the
            step statistics cached for ``get_job_goodput_details``.

        Returns:
          ``(goodput_percent, breakdown, max_productive_step)``; ``breakdown``
          is ``{}`` unless asked for, else ``{BadputType: percent}`` with
          ``CUSTOM_BADPUT_EVENTS`` a dict by upper-cased event type.

        Raises:
          ValueError: total time is zero (no job start recorded yet).
        """
        with self._lock:
            now = self._pull()
            result = self._calc.cumulative(now=now)
            if not result.total_seconds > 0:
                raise ValueError("Total job time is zero, Goodput cannot be calculated. "
                                 "Please fix the logging entries.")
            self._result = result
            self._update_step_info(configured_ideal_step_time)
            return (result.goodput,
                    _shapes.breakdown(result, elastic=self._elastic)
                    if include_badput_breakdown else {},
                    result.max_productive_step)

    def get_job_goodput_with_exclusions(
            self, exclusion_intervals: Sequence[Tuple[Any, Any]],
            include_badput_breakdown: bool = False,
            configured_ideal_step_time: Optional[float] = None,
    ) -> Tuple[float, _shapes.Breakdown, int, float]:
        """Cumulative goodput with the union of ``exclusion_intervals`` removed
        from every bucket and from total time.

        Args:
          exclusion_intervals: ``(start, end)`` pairs (datetimes of any time
            zone, naive = local time, or POSIX seconds).
          include_badput_breakdown: also return the badput breakdown.
          configured_ideal_step_time: as :meth:`get_job_goodput`.

        Returns:
          ``(goodput_percent, breakdown or {}, max_productive_step,
          excluded_seconds)``, percentages of the time left; ``(0.0, {},
          max_productive_step, excluded_seconds)`` when no time is left.

        Raises:
          ValueError: an interval that ends before it starts (the reference
            skips it silently).
        """
        with self._lock:
            now = self._pull()
            result = self._calc.cumulative(now=now, exclude=list(exclusion_intervals or ()))
            if not result.total_seconds > 0:
                return 0.0, {}, result.max_productive_step, result.excluded_seconds
            self._result = result
            self._update_step_info(configured_ideal_step_time)
            return (result.goodput,
                    _shapes.breakdown(result, elastic=self._elastic)
                    if include_badput_breakdown else {},
                    result.max_productive_step, result.excluded_seconds)

    def get_job_goodput_interval(self, interval_start: Any, interval_end: Any
                                 ) -> Tuple[float, _shapes.Breakdown, int, float, int]:
        """Goodput of the window ``[interval_start, interval_end]``.

        The window is clipped to the job's lifetime (up to the query time for
        a running job) and sees the whole history: a step that began before
        the window counts inside it (the reference ignores entries before the
        window, semantics.md rule 10).

        Args:
          interval_start, interval_end: datetimes (naive = local time) or POSIX seconds.

        Returns:
          ``(goodput_percent, breakdown_percent, max_productive_step,
          total_seconds_in_window, disruptions_in_window)``; the breakdown
          always has every key.

        Raises:
          ValueError: a missing or reversed bound, or no job time in the window.
        """
        result = self._interval(interval_start, interval_end)
        return (result.goodput, _shapes.breakdown(result, elastic=self._elastic),
                result.max_productive_step, result.total_seconds, result.disruptions)

    def _interval(self, interval_start: Any, interval_end: Any) -> GoodputResult:
        a = _shapes.as_seconds(interval_start, "interval_start")
        b = _shapes.as_seconds(interval_end, "interval_end")
        if not b > a:
            raise ValueError(f"interval ends at or before its start: [{a}, {b}]")
        with self._lock:
            now = self._pull()
            result = self._calc.window(a, b, now=now)
        if not result.total_seconds > 0:
            raise ValueError(f"no job time within the interval [{a}, {b}]")
        return result

    def get_step_deviation(self, configured_ideal_step_time: Optional[float] = None
                           ) -> Dict[int, float]:
        """Deviation of each step's time from the ideal step time.

        Args:
          configured_ideal_step_time: the ideal step time (seconds); default
            computed (semantics.md rule 12: steps under 1 s count).

        Returns:
          ``{step: |step_time - ideal|}`` in seconds, by step.

        Raises:
          ValueError: no step times, or no ideal step time.
        """
        with self._lock:
            self._pull()
            if not self._update_step_info(configured_ideal_step_time):
                raise ValueError("No step times or no ideal step time available.")
            return dict(self._deviations)

    def _update_step_info(self, configured: Optional[float]) -> bool:
        """Recomputes the cached step statistics; False (cache kept) if impossible."""
        if configured is not None and not (isinstance(configured, (int, float))
                                           and math.isfinite(configured) and configured > 0):
            logger.warning("goodput: ignoring configured ideal step time %r", configured)
            return False
        stats = self._calc.step_stats(configured)
        if not len(stats.steps) or stats.ideal_step_time is None:
            return False
        self._deviations, self._ideal = stats.as_dict(), stats.ideal_step_time
        return True

    # ------------------------------------------------------------ details
    def get_job_goodput_details(self) -> Dict[str, Any]:
        """Seconds of the last ``get_job_goodput*`` computation (monitoring).

        Returns:
          The reference's ``WorkloadMetricDetails`` dict (keys are the
          ``MetricType`` values; ``badput_time`` ``{BadputType: seconds}``
          with every key); the reference's empty shape before any computation.
        """
        with self._lock:
            if self._result is None:
                logger.warning("Goodput information unavailable: no computation yet")
                return _shapes.empty_details()
            return _shapes.job_details(self._result, self._deviations, self._ideal,
                                       elastic=self._elastic)

    def get_interval_metric_details(self, interval_start: Any, interval_end: Any
                                    ) -> Dict[str, Any]:
        """Interval goodput for monitoring.

        Args:
          interval_start, interval_end: the window (datetimes or POSIX seconds).

        Returns:
          ``{'interval_goodput': {GoodputType.TOTAL: percent},
          'interval_badput': {BadputType: percent}, 'interval_size':
          int(seconds of the unclipped window)}``; the two dicts are empty
          when the interval cannot be computed.
        """
        size = (_shapes.as_seconds(interval_end, "interval_end")
                - _shapes.as_seconds(interval_start, "interval_start"))
        try:
            result = self._interval(interval_start, interval_end)
        except ValueError as e:
            logger.warning("Failed to get interval metric details: %s", e)
            return _shapes.interval_details(None, None, size)
        return self._interval_details(result, size)

    def _interval_details(self, result: GoodputResult, size: float) -> Dict[str, Any]:
        return _shapes.interval_details(
            result.goodput, _shapes.breakdown(result, elastic=self._elastic), size)
