"""Mirror of ``ml_goodput_measurement``'s ``goodput_utils`` module (0.2.3).

Change ``from ml_goodput_measurement import goodput_utils`` to
``from goodput_core.compat import goodput_utils``: public names, enum members
and values, signatures, positional order and defaults are the reference's.
Deliberate differences (each tested in tests/core/test_compat_utils.py):

* ``compute_ideal_step_time`` keeps steps under one second (semantics.md rule
  12) and ignores negative and non-finite step times.
* Metadata lookups never block for long: ``timeout`` is one deadline for all
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

import dataclasses
import datetime
import enum
import logging
import math
import os
import time
import types
from typing import Any, Optional, TypedDict, Union

# The same class as the engine's (an IntEnum with the reference's names and
# numbers; the reference's is a plain Enum): results of either layer share keys.
from goodput_core.compat._badput import BadputType

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

logger = logging.getLogger(__name__)

_TIME_ENTRY = "time"

# Substring of the machine-type name -> accelerator type. Order matters: the
# first key found in the name wins ('ct5lp' before 'ct5l', 'tpu' after the
# specific TPU names), as in the reference.
MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING = types.MappingProxyType({
    "tpu7x": "TPU-7x",
    "ct6e": "TPU-v6e",
    "ct5p": "TPU-v5p",
    "ct5lp": "TPU-v5e",
    "ct5l": "TPU-v5e",
    "ct4p": "TPU-v4p",
    "ct3p": "TPU-v3",
    "ct3": "TPU-v3",
    "tpu-v2": "TPU-v2",
    "tpu": "TPU",
    "a3-edgegpu": "NVIDIA-H100",
    "a3-highgpu": "NVIDIA-H100",
    "a3-megagpu": "NVIDIA-H100",
    "a3-ultragpu": "NVIDIA-H200",
    "a2": "NVIDIA-A100",
    "gpu": "GPU",
})


@dataclasses.dataclass
class GCPOptions:
    """Google Cloud settings of a monitor; plain values only, no lookups."""

    project_id: Optional[str] = None
    location: Optional[str] = None
    replica_id: str = "0"
    acc_type: Optional[str] = None
    cluster_name: Optional[str] = None
    enable_gcp_goodput_metrics: bool = True
    enable_gcp_step_deviation_metrics: bool = True


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


# ---- GCP metadata server ---------------------------------------------------

METADATA_HOST_ENV = "GCE_METADATA_HOST"  # host[:port], as google-auth reads it
_LEGACY_METADATA_HOST_ENV = "GCE_METADATA_ROOT"
# The metadata server's fixed link-local address: no DNS lookup, which a
# socket timeout does not bound, on machines outside Google Cloud.
_DEFAULT_METADATA_HOST = "169.254.169.254"
_METADATA_HEADERS = {"Metadata-Flavor": "Google"}
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_BACKOFF_FACTOR = 0.5
# Module attributes so that tests can drive time without sleeping.
_monotonic = time.monotonic
_sleep = time.sleep


def metadata_base_url() -> str:
    """``http://HOST/computeMetadata/v1/``; HOST from ``GCE_METADATA_HOST`` when set."""
    host = (os.environ.get(METADATA_HOST_ENV) or os.environ.get(_LEGACY_METADATA_HOST_ENV)
            or _DEFAULT_METADATA_HOST).strip().rstrip("/")
    if "://" not in host:
        host = "http://" + host
    return f"{host}/computeMetadata/v1/"


# Google Cloud VMs (GCE, GKE nodes, Cloud TPU VMs) say so in their DMI data,
# readable without the network (google-auth reads the same file).
_DMI_FILES = ("/sys/class/dmi/id/product_name", "/sys/class/dmi/id/sys_vendor")


def metadata_server_expected() -> bool:
    """True when a GCE metadata server should answer here, decided without the network.

    True when ``GCE_METADATA_HOST`` (or ``GCE_METADATA_ROOT``) names one, or
    when the machine's DMI data says it is a Google Cloud VM. Automatic
    lookups (the Cloud Monitoring exporter's project, zone and accelerator
    type) happen only then, so that a job off Google Cloud never sends a
    packet to 169.254.169.254.
    """
    if os.environ.get(METADATA_HOST_ENV) or os.environ.get(_LEGACY_METADATA_HOST_ENV):
        return True
    for path in _DMI_FILES:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                if f.read(256).strip().startswith("Google"):
                    return True
        except OSError:
            continue
    return False


def get_gcp_metadata(category: str, attribute: str, timeout=5, retries=3):
    """Fetches one value from the GCP metadata server.

    Args:
      category: e.g. 'instance' or 'project'.
      attribute: e.g. 'zone' or 'attributes/cluster-name'.
      timeout: overall deadline in seconds, retries included (None: none).
      retries: retries after answers 429/500/502/503/504 (backoff 0, 1, 2 s...
        cut to the deadline). An unreachable server is not retried.

    Returns:
      The value as text, or ``None`` when it cannot be fetched.
    """
    # Imported here: http.client and ssl cost ~25 ms, which every user of the
    # statistics helpers would otherwise pay.
    import http.client  # pylint: disable=import-outside-toplevel
    import urllib.error  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel

    url = f"{metadata_base_url()}{category}/{attribute}"
    deadline = math.inf if timeout is None else _monotonic() + float(timeout)
    # An empty ProxyHandler: the metadata server is never reached via a proxy.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    attempt = 0
    while True:
        remaining = deadline - _monotonic()
        if remaining <= 0:
            logger.warning("Metadata %s/%s: timed out", category, attribute)
            return None
        request = urllib.request.Request(url, headers=_METADATA_HEADERS)
        try:
            with opener.open(request, timeout=None if math.isinf(remaining) else remaining) as resp:
                return resp.read().decode("utf-8")
        except urllib.error.HTTPError as e:
            if e.code not in _RETRY_STATUSES or attempt >= retries:
                logger.warning("Metadata %s/%s: HTTP %s", category, attribute, e.code)
                return None
        except (OSError, http.client.HTTPException, ValueError) as e:
            # Refused, unreachable or timed out: not on Google Cloud, or the
            # server is gone; retrying would only block the caller longer.
            logger.warning("Metadata %s/%s unavailable: %s", category, attribute,
                           type(e).__name__)
            return None
        attempt += 1
        delay = 0.0 if attempt == 1 else _BACKOFF_FACTOR * 2 ** (attempt - 1)
        delay = min(delay, deadline - _monotonic())
        if delay > 0:
            _sleep(delay)


def get_gcp_project_id():
    """The project id of the current GCP project, or ``None``."""
    return get_gcp_metadata("project", "project-id")


def get_node_zone():
    """The zone of the instance (last part of 'projects/N/zones/ZONE'), or ``None``."""
    zone_path = get_gcp_metadata("instance", "zone")
    return zone_path.rsplit("/", 1)[-1] if zone_path else None


def get_accelerator_type():
    """The accelerator type from the machine type, or 'UNKNOWN'."""
    machine_type = get_gcp_metadata("instance", "machine-type")
    name = machine_type.split("/")[-1].lower() if machine_type else ""
    if not name:
        return "UNKNOWN"
    for fragment, accelerator in MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING.items():
        if fragment in name:
            return accelerator
    return "UNKNOWN"


def get_cluster_name() -> Optional[str]:
    """The GKE cluster name from the instance attributes, or ``None``."""
    return get_gcp_metadata("instance", "attributes/cluster-name")
