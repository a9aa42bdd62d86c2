"""Helpers of the compat calculators: event feeds and the reference's return shapes.

The compat ``GoodputCalculator`` computes every number with the engine's
:class:`~goodput_core.calculator.Calculator`; this module turns a
:class:`~goodput_core.results.GoodputResult` into the tuples and dicts that
``ml_goodput_measurement`` 0.2.3 returns (keys, key types, units), and reads
events incrementally from either source the reference's API allows: one of
our stores, or a duck-typed ``cloud_logger``.

Shapes (docs/reference-notes.md, "Return shapes"):

* breakdowns are ``{BadputType: percent}``, ``CUSTOM_BADPUT_EVENTS`` being
  ``{UPPER_CASED_TYPE: percent}``;
* ``badput_time`` of the details is the same in seconds;
* details and interval details are keyed by the *values* of ``MetricType`` /
  ``IntervalMetricType`` (plain strings), productive time by
  ``GoodputType.TOTAL``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Union

from goodput_core.buckets import BASE_BADPUT, ELASTIC_BADPUT
from goodput_core.compat._badput import BadputType
from goodput_core.compat.goodput_utils import GoodputType, IntervalMetricType, MetricType
from goodput_core.events import to_timestamp
from goodput_core.results import GoodputResult
from goodput_core.recorder import flush_before_read
from goodput_core.stores import open_store

__all__ = [
    "Breakdown",
    "CloudLoggerFeed",
    "StoreFeed",
    "breakdown",
    "empty_details",
    "interval_details",
    "job_details",
]

Breakdown = Dict[BadputType, Union[float, Dict[str, float]]]

_CUSTOM = BadputType.CUSTOM_BADPUT_EVENTS


# --------------------------------------------------------------- shapes
def bucket_keys(result: GoodputResult, elastic: bool) -> Tuple[BadputType, ...]:
    """The breakdown keys: the eleven base buckets, plus the elastic three
    for an elastic calculator or a run that recorded elastic events (our
    partition has them; leaving them out would break the 100 % sum)."""
    if elastic or any(k in result.badput_seconds for k in ELASTIC_BADPUT):
        return BASE_BADPUT + ELASTIC_BADPUT
    return BASE_BADPUT


def breakdown(result: GoodputResult, seconds: bool = False, elastic: bool = False) -> Breakdown:
    """The reference-shaped badput breakdown of ``result``.

    Args:
      result: a query result of the engine.
      seconds: seconds (``badput_time`` of the details) instead of percent.
      elastic: always include the three elastic buckets.

    Returns:
      ``{BadputType: value}`` with ``CUSTOM_BADPUT_EVENTS`` a dict by type.
      Unlike the reference, a bucket equal to the total is 100 %, not 0 %
      (semantics.md rule 9), and every key is present in seconds too.
    """
    flat = result.badput_seconds if seconds else result.badput_percent
    custom = result.custom_badput_seconds if seconds else result.custom_badput_percent
    out: Breakdown = {}
    for key in bucket_keys(result, elastic):
        ref_key = BadputType(int(key))  # the reference's enum, not the engine's
        out[ref_key] = {k: float(v) for k, v in custom.items()} if key == _CUSTOM \
            else float(flat.get(key, 0.0))
    # The reference has no HANG bucket: its keys stay, and hang time is OTHER.
    out[BadputType.OTHER] += float(flat.get(15, 0.0))  # the engine's BadputType.HANG
    return out


def empty_details() -> Dict[str, Any]:
    """``get_job_goodput_details()`` before any computation (the reference's)."""
    return {
        MetricType.GOODPUT_TIME.value: {},
        MetricType.BADPUT_TIME.value: {},
        MetricType.MAX_PRODUCTIVE_STEP.value: 0,
        MetricType.TOTAL_ELAPSED_TIME.value: 0.0,
        MetricType.DISRUPTION_COUNT.value: 0,
        MetricType.STEP_TIME_DEVIATION.value: {},
        MetricType.IDEAL_STEP_TIME.value: 0.0,
        MetricType.TOTAL_EXCLUDED_TIME.value: 0.0,
    }


def job_details(result: GoodputResult, deviations: Dict[int, float],
                ideal_step_time: Optional[float], elastic: bool = False) -> Dict[str, Any]:
    """``get_job_goodput_details()`` of the last cumulative computation.

    Args:
      result: the result of the last ``get_job_goodput*`` call.
      deviations: ``{step: seconds}`` of that call (may be empty).
      ideal_step_time: of that call, or None.
      elastic: always include the elastic buckets.

    Returns:
      The reference's dict; ``total_excluded_time`` is the excluded time of
      that call (the reference always reports 0.0, semantics.md rule 10).
    """
    return {
        MetricType.GOODPUT_TIME.value: {GoodputType.TOTAL: float(result.productive_seconds)},
        MetricType.BADPUT_TIME.value: breakdown(result, seconds=True, elastic=elastic),
        MetricType.MAX_PRODUCTIVE_STEP.value: int(result.max_productive_step),
        MetricType.TOTAL_ELAPSED_TIME.value: float(result.total_seconds),
        MetricType.DISRUPTION_COUNT.value: int(result.disruptions),
        MetricType.STEP_TIME_DEVIATION.value: dict(deviations),
        MetricType.IDEAL_STEP_TIME.value: float(ideal_step_time or 0.0),
        MetricType.TOTAL_EXCLUDED_TIME.value: float(result.excluded_seconds),
    }


def interval_details(goodput: Optional[float], badput: Optional[Breakdown],
                     size_seconds: float) -> Dict[str, Any]:
    """``get_interval_metric_details()``; ``goodput=None`` gives the empty dicts
    the reference returns when the interval query failed."""
    return {
        IntervalMetricType.INTERVAL_GOODPUT.value:
            {} if goodput is None else {GoodputType.TOTAL: float(goodput)},
        IntervalMetricType.INTERVAL_BADPUT.value: {} if badput is None else badput,
        IntervalMetricType.INTERVAL_SIZE.value: int(size_seconds),
    }


def as_seconds(value: Any, name: str) -> float:
    """A query bound (aware/naive datetime or POSIX seconds) as POSIX seconds.

    Raises:
      ValueError: None, or anything else that is not a time.
    """
    if value is None:
        raise ValueError(f"{name} is required")
    return to_timestamp(value)


# ----------------------------------------------------------------- feeds
class StoreFeed:
    """Reads one run of a store incrementally (the store's own cursor).

    Args:
      run: the run (job) name.
      store: a store URL, path, open Store, or None for the default store.
    """

    def __init__(self, run: str, store: Any):
        self.run = run
        self.store = open_store(store)
        self._cursor = None

    def pull(self, calc, query_time: float) -> int:  # noqa: ARG002
        """Adds the events new since the last pull to ``calc``; returns how many.

        ``query_time`` is unused: a store holds no events from the future
        that a reader must hide (those are clipped by the query's ``now``).
        What this process recorded for the run in that store is stored first
        (:func:`goodput_core.recorder.flush_before_read`).
        """
        flush_before_read(self.run, self.store)
        n, self._cursor = calc.pull(self.store, self._cursor)  # paged, as columns
        return n


class CloudLoggerFeed:
    """Reads a duck-typed ``cloud_logger`` incrementally, like the reference.

    The contract is ``read_cloud_logging_entries(start_time=None,
    end_time=None, last_entry_info=None) -> (payloads, (last_timestamp,
    last_insert_id))``, entries in ascending order. The first read passes no
    bounds, as the reference's does: everything logged so far, also entries
    stamped later than the query time (a host whose clock runs ahead, a job
    laid out ahead of time). Later reads pass the cursor of the previous
    answer as ``start_time``/``last_entry_info`` and no ``end_time``: the
    cursor can then never move past an entry that was not returned, so no
    entry is lost, whatever the query time (the reference bounds later reads
    by the query time and skips them while the query time is before its
    cursor). Nothing is cached on disk (the reference's file cache can go
    stale across processes).

    Args:
      run: the job name (payloads of other jobs are skipped and counted).
      cloud_logger: the reader.
    """

    def __init__(self, run: str, cloud_logger: Any):
        self.run = run
        self.cloud_logger = cloud_logger
        self._last: Optional[Tuple[Any, Any]] = None

    def pull(self, calc, query_time: float) -> int:  # noqa: ARG002
        """Adds the entries new since the last pull to ``calc``; returns how
        many were read (slice counts among them feed the calculator's
        slice efficiency like every other event). ``query_time`` bounds
        nothing: events after it are clipped by the query's ``now``."""
        if self._last is None:
            payloads, info = self.cloud_logger.read_cloud_logging_entries()
        else:
            payloads, info = self.cloud_logger.read_cloud_logging_entries(
                start_time=self._last[0], last_entry_info=self._last)
        if info and info[0] is not None:
            self._last = (info[0], info[1])
        payloads = list(payloads or ())
        calc.add_payloads(payloads)
        return len(payloads)
