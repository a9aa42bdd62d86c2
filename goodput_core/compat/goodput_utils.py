"""Mirror of ``ml_goodput_measurement``'s ``goodput_utils`` module (0.2.3).

Change ``from ml_goodput_measurement import goodput_utils`` to
``from goodput_core.compat import goodput_utils``: public names, enum members
and values, signatures, positional order and defaults are the reference's.
Deliberate differences (each tested in tests/core/compat/test_utils.py):

* ``compute_ideal_step_time`` keeps steps under one second (semantics.md rule
  12) and ignores negative and non-finite step times.
* Metadata lookups (:mod:`goodput_core.gcp`, re-exported here) never block for long: ``timeout`` is one deadline for all
  attempts (the reference: per attempt, plus 3 retries with backoff), an
  unreachable server is not retried, proxies are bypassed, and the host is
  ``GCE_METADATA_HOST`` (as google-auth reads it) or the link-local address,
  so no DNS lookup can hang. ``GCPOptions()`` looks nothing up.
* Off Google Cloud nothing probes the metadata server by itself:
  :func:`metadata_server_expected` (local files and environment only) is
  False there, and the Cloud Monitoring exporter then skips its lookups
  (an explicit ``GCE_METADATA_HOST`` turns them back on). Calling
  ``get_gcp_metadata`` yourself still asks the server.
* ``GoodputInfo()`` stamps its own construction time (the reference's default
  is evaluated once, at import).
* ``get_timestamp_from_log_entry`` returns ``None`` where the reference raises
  (a non-numeric first ``*time*`` value, e.g. Orbax's None start times);
  ``get_extra_time_from_anomalous_steps([])`` is 0.0, not NaN.
* Pure-Python statistics (no numpy/scipy import); means use ``math.fsum`` and
  may differ from numpy's in the last bits.
"""

from __future__ import annotations

import datetime
import enum
import math
from typing import Any, Optional, TypedDict, Union

# The same class as the engine's (an IntEnum with the reference's names and
# numbers; the reference's is a plain Enum): results of either layer share keys.
from goodput_core.compat._badput import BadputType
# The metadata helpers and GCPOptions live in the engine (the Cloud Monitoring
# exporter needs them, and the engine never imports compat); re-exported here.
from goodput_core.gcp import (
    MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING, METADATA_HOST_ENV, GCPOptions,
    get_accelerator_type, get_cluster_name, get_gcp_metadata, get_gcp_project_id,
    get_node_zone, metadata_base_url, metadata_server_expected)

__all__ = [
    "ACTIVITY_EXCLUSION_LIST", "BadputType", "ElasticIntervalWorkloadMetricDetails",
    "ElasticWorkloadMetricDetails", "GCPOptions", "GoodputInfo", "GoodputType",
    "IntervalMetricType", "IntervalWorkloadMetricDetails",
    "MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING", "METADATA_HOST_ENV", "MetricType",
    "MonitoringWindowType", "StepInfo", "WorkloadMetricDetails", "compute_ideal_step_time",
    "compute_percentile", "compute_step_deviation_from_baseline", "get_accelerator_type",
    "get_anomalous_and_normal_step_times", "get_cluster_name",
    "get_extra_time_from_anomalous_steps", "get_gcp_metadata", "get_gcp_project_id",
    "get_node_zone", "get_timestamp_from_log_entry", "metadata_base_url",
    "metadata_server_expected",
]

_TIME_ENTRY = "time"


class MetricType(enum.Enum):
    """The type of CUMULATIVE metric."""

    GOODPUT_TIME = "goodput_time"
    BADPUT_TIME = "badput_time"
    MAX_PRODUCTIVE_STEP = "max_productive_step"
    TOTAL_ELAPSED_TIME = "total_elapsed_time"
    DISRUPTION_COUNT = "disruption_count"
    STEP_TIME_DEVIATION = "step_time_deviation"
    IDEAL_STEP_TIME = "ideal_step_time"
    TOTAL_EXCLUDED_TIME = "total_excluded_time"


class IntervalMetricType(enum.Enum):
    """The type of INTERVAL metric."""

    INTERVAL_GOODPUT = "interval_goodput"
    INTERVAL_BADPUT = "interval_badput"
    INTERVAL_SIZE = "interval_size"


class GoodputType(enum.Enum):
    """The type of goodput (productive time is not broken down further)."""

    TOTAL = 1


class WorkloadMetricDetails(TypedDict):
    goodput_time: dict[GoodputType, float]
    badput_time: dict[BadputType, Union[float, dict[str, float]]]
    max_productive_step: int
    total_elapsed_time: float
    disruption_count: int
    step_time_deviation: dict[int, float]
    ideal_step_time: float
    total_excluded_time: float


class IntervalWorkloadMetricDetails(TypedDict):
    interval_goodput: dict[GoodputType, float]
    interval_badput: dict[BadputType, Union[float, dict[str, float]]]
    interval_size: int  # seconds


class ElasticWorkloadMetricDetails(WorkloadMetricDetails, total=False):
    stepping_slice_efficiency: float
    available_slice_efficiency: float


class ElasticIntervalWorkloadMetricDetails(IntervalWorkloadMetricDetails, total=False):
    stepping_slice_efficiency: float
    available_slice_efficiency: float


# Async data loading overlaps training: reported, never counted as badput.
ACTIVITY_EXCLUSION_LIST = ("DATA_LOADING_ASYNC",)


class MonitoringWindowType(enum.Enum):
    """The type of monitoring window."""

    CUMULATIVE = "cumulative"
    INTERVAL = "interval"


_DEFAULT_RECENT_WINDOW_SIZE = 100
_DEFAULT_BASELINE_WINDOW_SIZE = 1000
_DEFAULT_SPIKE_PERCENTILE = 90


class GoodputInfo:
    """Goodput information of the last computation (seconds)."""

    def __init__(
        self,
        total_productive_time: float = 0.0,
        total_elapsed_time: float = 0.0,
        total_unproductive_time: Optional[dict[BadputType, Union[float, dict[str, float]]]] = None,
        max_productive_step: int = 0,
        last_recorded_step: int = 0,
        last_updated_timestamp: Optional[datetime.datetime] = None,
        number_of_disruptions: int = 0,
        total_excluded_time: float = 0.0,
    ):
        self.total_productive_time = total_productive_time
        self.total_elapsed_time = total_elapsed_time
        self.total_unproductive_time = total_unproductive_time or {}
        self.max_productive_step = max_productive_step
        self.last_recorded_step = last_recorded_step
        self.last_updated_timestamp = (
            last_updated_timestamp if last_updated_timestamp is not None
            else datetime.datetime.now(datetime.timezone.utc))
        self.number_of_disruptions = number_of_disruptions
        self.total_excluded_time = total_excluded_time


class StepInfo:
    """Ideal step time and the deviation of each step from it (seconds)."""

    def __init__(self, ideal_step_time: float, step_deviations: dict[int, float]):
        self.ideal_step_time = ideal_step_time
        self.step_deviations = step_deviations


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def _mad_threshold(values: list[float]) -> float:
    """median + 3 * raw median absolute deviation (scipy's default scale=1)."""
    med = _median(values)
    return med + _median([abs(v - med) for v in values]) * 3


def compute_percentile(values: list[float], percentile: float) -> float:
    """Linearly interpolated ``percentile`` (0-100) of ``values``; 0.0 when empty.

    Args:
      values: numbers in any order.
      percentile: 0 to 100.

    Returns:
      The interpolated value.
    """
    if not values:
        return 0.0
    ordered = sorted(values)
    index = (len(ordered) - 1) * (percentile / 100.0)
    lower = int(index)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (index - lower)


def compute_step_deviation_from_baseline(
    step_time_deviation: dict[int, float],
    mode: MonitoringWindowType = MonitoringWindowType.CUMULATIVE,
    recent_window_size: int = _DEFAULT_RECENT_WINDOW_SIZE,
    baseline_window_size: int = _DEFAULT_BASELINE_WINDOW_SIZE,
    spike_percentile: int = _DEFAULT_SPIKE_PERCENTILE,
) -> float:
    """Spike-sensitive aggregate of step-time deviations, as the reference uploads it.

    Args:
      step_time_deviation: step -> deviation in seconds, in step order.
      mode: CUMULATIVE (spikes minus a baseline) or INTERVAL (spikes only);
        the enum's value string is accepted too.
      recent_window_size, baseline_window_size: window lengths in steps.
      spike_percentile: the percentile taken over the recent window.

    Returns:
      The mean absolute deviation below 100 steps; else the percentile of the
      recent window, minus the baseline median once a full baseline exists.

    Raises:
      ValueError: unknown ``mode`` (with 100 steps or more, as the reference).
    """
    if not step_time_deviation:
        return 0.0
    deviations = [abs(d) for d in step_time_deviation.values()]
    # The reference tests against its default window, not the argument.
    if len(deviations) < _DEFAULT_RECENT_WINDOW_SIZE:
        return _mean(deviations)
    try:
        mode = MonitoringWindowType(mode)
    except ValueError:
        raise ValueError(f"Unsupported MonitoringWindowType mode: {mode}") from None
    recent = deviations[-recent_window_size:]
    spike = compute_percentile(recent, spike_percentile)
    if mode is MonitoringWindowType.INTERVAL:
        return spike
    if len(deviations) < recent_window_size + baseline_window_size:
        return spike
    baseline = deviations[-(recent_window_size + baseline_window_size):-recent_window_size]
    return spike - _median(baseline) if baseline else spike


def compute_ideal_step_time(step_times: list[float]) -> Optional[float]:
    """Mean of the step times that are not anomalous (<= median + 3 * MAD).

    Unlike the reference, steps under one second count (semantics.md rule 12);
    negative and non-finite values are ignored.

    Args:
      step_times: step durations in seconds.

    Returns:
      The ideal step time, or ``None`` without usable step times.
    """
    times = [float(t) for t in step_times
             if isinstance(t, (int, float)) and math.isfinite(t) and t >= 0]
    if not times:
        return None
    limit = _mad_threshold(times)
    normal = [t for t in times if t <= limit]
    return _mean(normal) if normal else None


def get_anomalous_and_normal_step_times(step_times: list[Any]) -> tuple[list[Any], list[Any]]:
    """Splits step times at median + 3 * MAD.

    Args:
      step_times: step durations in seconds.

    Returns:
      (anomalous, normal), each in input order.
    """
    if not step_times:
        return [], []
    limit = _mad_threshold(list(step_times))
    anomalous = [t for t in step_times if t > limit]
    normal = [t for t in step_times if not t > limit]
    return anomalous, normal


def get_extra_time_from_anomalous_steps(step_times: list[Any]) -> float:
    """Time the anomalous steps took beyond the mean normal step.

    Args:
      step_times: step durations in seconds.

    Returns:
      sum(anomalous) - len(anomalous) * mean(normal); 0.0 for no steps.
    """
    anomalous, normal = get_anomalous_and_normal_step_times(step_times)
    if not normal:
        return 0.0
    return sum(anomalous) - len(anomalous) * _mean(normal)


def get_timestamp_from_log_entry(entry: dict[str, Any]) -> Optional[datetime.datetime]:
    """The entry's time: the value of its first key containing 'time'.

    Args:
      entry: a log payload.

    Returns:
      An aware UTC datetime, or ``None`` when no key contains 'time' or its
      value is not a finite number (the reference raises for the latter).
    """
    for label, value in entry.items():
        if _TIME_ENTRY in label:
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                return None
            return datetime.datetime.fromtimestamp(value, datetime.timezone.utc)
    return None
