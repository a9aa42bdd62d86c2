"""Runs the REFERENCE calculator (ml-goodput-measurement 0.2.3) offline.

``GoodputCalculator(job_name, logger_name, cloud_logger=...)`` reads every log
entry through a duck-typed ``cloud_logger``; :class:`FakeCloudLogger` is an
in-memory one that emulates the real ``_CloudLogger`` query. Each run gets a
fresh calculator, a fresh temporary ``cache_dir`` (the reference appends its
entries to ``{cache_dir}/{job}_timeline.jsonl`` and reuses a stale one), no
``gcs_path`` (no GCS sync), and a frozen clock (:func:`frozen_reference_clock`:
the reference takes its query time from ``datetime.datetime.now(utc)``).
Orbax statistics are read from the same stream (the calculator runs
``CheckpointBadputCalculator`` with ``use_goodput_logger=True`` on the cached
entries), so no checkpoint logger is faked. Results are plain dicts keyed by
bucket NAME, comparable with ours; docs/reference-notes.md has the facts.

Units: ``get_job_goodput`` returns PERCENT (a bucket that is not positive or
not below the total is reported as 0 %); ``get_job_goodput_details`` returns
SECONDS, which is where ``*_seconds`` come from (no conversion). Interval
queries keep no seconds: they are derived as ``percent * total / 100``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import tempfile
import threading
import time
import types
import unittest.mock
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from ml_goodput_measurement.src import goodput as _ref_goodput
from ml_goodput_measurement.src import goodput_exclusion as _ref_exclusion
from ml_goodput_measurement.src import goodput_utils as _ref_utils

__all__ = [
    "FakeCloudLogger",
    "REFERENCE_BUCKETS",
    "entry_timestamp",
    "frozen_reference_clock",
    "reference_interval_goodput",
    "reference_job_goodput",
    "reference_job_goodput_with_exclusions",
    "reference_step_deviation",
]

UTC = _dt.timezone.utc
DEFAULT_JOB_NAME = "reference-harness-job"
# Every BadputType name of the reference, in its numbering order.
REFERENCE_BUCKETS: Tuple[str, ...] = tuple(m.name for m in _ref_utils.BadputType)
_ORBAX_SPAN_KEYS = {
    "save": ("checkpoint_manager_blocking_start_time", "checkpoint_manager_blocking_duration_secs"),
    "restore": ("checkpoint_manager_start_time", "checkpoint_manager_duration_secs"),
    "emergency_restore": ("checkpoint_manager_start_time", "checkpoint_manager_duration_secs"),
}
# mock.patch on module globals is process-wide: serialise reference runs.
_LOCK = threading.RLock()

TimeLike = Any  # POSIX seconds (float) or datetime (naive = UTC)
Payloads = Sequence[Mapping[str, Any]]


def _to_datetime(value: TimeLike) -> _dt.datetime:
    """POSIX seconds or datetime -> aware UTC datetime (rounded to 1 us, as datetime is)."""
    if isinstance(value, _dt.datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return _dt.datetime.fromtimestamp(float(value), UTC)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def entry_timestamp(payload: Mapping[str, Any]) -> Optional[float]:
    """The time at which a payload would have been written to the log.

    Args:
      payload: one reference-format payload.

    Returns:
      Orbax entries: the end of the blocking span (when Orbax logs them);
      others: the first ``*_time``/``*_timestamp`` number; else ``None``.
    """
    keys = _ORBAX_SPAN_KEYS.get(payload.get("event_type"))
    if keys is not None:
        start, duration = payload.get(keys[0]), payload.get(keys[1])
        if _is_number(start) and _is_number(duration):
            return float(start) + float(duration)
        return None
    for key, value in payload.items():
        if (key.endswith("_time") or key.endswith("_timestamp")) and _is_number(value):
            return float(value)
    return None


def _as_logged(value: Any) -> Any:
    """A copy with every number a double, as Cloud Logging's Struct gives them back.

    It matters: the reference drops int-valued buckets (``isinstance(v, float)``).
    """
    if isinstance(value, Mapping):
        return {k: _as_logged(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_logged(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


class FakeCloudLogger:
    """In-memory stand-in for the reference's ``_CloudLogger``.

    Emulates the real query: entries of this job only, ``timestamp <= end``
    (end defaults to the clock's now), and a lower bound taken from
    ``last_entry_info`` (strictly after that (timestamp, id)), else
    ``start_time``, else ``job_start_time - 10 s`` once a job start was read,
    else ``end - retention``. Entries are returned in write order.

    Args:
      job_name: the job whose entries reads return.
      clock: returns "now" as POSIX seconds (used when ``end_time`` is None).
      retention: the default look-back window; ``None`` for unlimited.
    """

    def __init__(self, job_name: str, clock=time.time,
                 retention: Optional[_dt.timedelta] = _dt.timedelta(days=7)):
        self.job_name = job_name
        self.job_start_time: Optional[_dt.datetime] = None
        self.reads: List[Dict[str, Any]] = []
        self._clock = clock
        self._retention = retention
        self._rows: List[Tuple[_dt.datetime, str, Dict[str, Any]]] = []

    def append(self, payload: Mapping[str, Any], timestamp: Optional[TimeLike] = None) -> None:
        """Stores a payload; ``timestamp`` (write time) defaults to
        :func:`entry_timestamp`, clamped so that write times never go backwards."""
        if timestamp is None:
            t = entry_timestamp(payload)
            ts = _to_datetime(t) if t is not None else _to_datetime(self._clock())
            if self._rows and ts < self._rows[-1][0]:
                ts = self._rows[-1][0]
        else:
            ts = _to_datetime(timestamp)
        self._rows.append((ts, f"{len(self._rows):012d}", dict(payload)))

    def write_cloud_logging_entry(self, entry: Optional[Mapping[str, Any]]) -> None:
        """The recorder's write path: like the real one, drops foreign job names."""
        if entry is None or entry.get("job_name") != self.job_name:
            return
        self.append(entry)

    def flush(self) -> None:
        """Writes are synchronous here; nothing to wait for."""

    def _lower_bound(self, start_time, end, last_entry_info):
        """(timestamp, insert id) that returned rows must exceed, or None."""
        past_any_id = "\uffff"  # a bare timestamp bound is strict: no id passes it
        if last_entry_info and last_entry_info[0] is not None:
            return _to_datetime(last_entry_info[0]), last_entry_info[1] or ""
        if start_time is not None:
            return _to_datetime(start_time), past_any_id
        if self.job_start_time is not None:
            return self.job_start_time - _dt.timedelta(seconds=10), past_any_id
        if self._retention is not None:
            return end - self._retention, past_any_id
        return None

    def read_cloud_logging_entries(self, start_time=None, end_time=None, last_entry_info=None):
        """Returns ``(payloads, (last_timestamp, last_insert_id))`` like the real reader."""
        self.reads.append({"start_time": start_time, "end_time": end_time,
                           "last_entry_info": last_entry_info})
        end = _to_datetime(self._clock() if end_time is None else end_time)
        lo = self._lower_bound(start_time, end, last_entry_info)
        rows = [r for r in self._rows if r[2].get("job_name") == self.job_name
                and r[0] <= end and (lo is None or (r[0], r[1]) > lo)]
        payloads = [_as_logged(p) for _, _, p in rows]
        if self.job_start_time is None:  # the real reader remembers the first job start
            starts = [p["job_start_time"] for p in payloads if "job_start_time" in p]
            self.job_start_time = _to_datetime(starts[0]) if starts else None
        last = (rows[-1][0], rows[-1][1]) if rows else (None, None)
        return payloads, last


def _clock_module(query_time: TimeLike) -> types.ModuleType:
    """A copy of the ``datetime`` module whose ``datetime.now()`` is frozen."""
    frozen = _to_datetime(query_time)

    class _FrozenDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz=None):  # the reference always passes timezone.utc
            return frozen.astimezone(tz) if tz is not None else frozen.astimezone().replace(tzinfo=None)

        @classmethod
        def utcnow(cls):
            return frozen.replace(tzinfo=None)

    shim = types.ModuleType("datetime")
    shim.__dict__.update({k: v for k, v in vars(_dt).items() if not k.startswith("__")})
    shim.datetime = _FrozenDatetime
    return shim


@contextlib.contextmanager
def frozen_reference_clock(query_time: TimeLike) -> Iterator[None]:
    """Freezes ``datetime.now()`` as seen by the reference's calculator modules.

    Only ``goodput`` and ``goodput_exclusion`` read the clock during queries;
    the real ``datetime`` module and every other module stay untouched.

    Args:
      query_time: the frozen "now" (POSIX seconds or datetime).
    """
    shim = _clock_module(query_time)
    with _LOCK, unittest.mock.patch.object(_ref_goodput, "datetime", shim), \
            unittest.mock.patch.object(_ref_exclusion, "datetime", shim):
        yield


def _job_name_of(payloads: Iterable[Mapping[str, Any]]) -> str:
    for p in payloads:
        if p.get("event_type") is None and isinstance(p.get("job_name"), str):
            return p["job_name"]
    return DEFAULT_JOB_NAME


def _merged_stream(payloads, checkpoint_entries, job_name) -> List[Dict[str, Any]]:
    """Payloads in the given order, checkpoint entries inserted by write time."""
    keyed, running = [], -math.inf
    for i, p in enumerate(payloads):
        t = entry_timestamp(p)
        running = max(running, t) if t is not None else running
        keyed.append((running, 0, i, dict(p)))
    for i, c in enumerate(checkpoint_entries or ()):
        entry = dict(c)
        entry.setdefault("job_name", job_name)  # appended last, as Orbax's logger does
        t = entry_timestamp(entry)
        keyed.append((t if t is not None else running, 1, i, entry))
    keyed.sort(key=lambda k: (k[0], k[1], k[2]))
    return [k[3] for k in keyed]


@contextlib.contextmanager
def _reference_session(payloads, checkpoint_entries, clock_time, job_name=None):
    """A fresh reference calculator over a fake logger, clock frozen at clock_time."""
    payloads = list(payloads)
    job = job_name or _job_name_of(payloads)
    now = _to_datetime(clock_time).timestamp()
    fake = FakeCloudLogger(job, clock=lambda: now)
    for p in _merged_stream(payloads, checkpoint_entries, job):
        fake.append(p)
    with tempfile.TemporaryDirectory(prefix="goodput-ref-cache-") as cache_dir, \
            frozen_reference_clock(clock_time):
        calc = _ref_goodput.GoodputCalculator(
            job, "reference-harness-log", cloud_logger=fake, cache_dir=cache_dir)
        yield calc, fake


def _by_name(unproductive: Mapping[Any, Any]) -> Dict[str, Any]:
    """Reference {BadputType: value} -> {name: float}, every bucket present."""
    out: Dict[str, Any] = {}
    for member in _ref_utils.BadputType:
        value = unproductive.get(member)
        if member is _ref_utils.BadputType.CUSTOM_BADPUT_EVENTS:
            out[member.name] = {k: float(v) for k, v in (value or {}).items()}
        else:
            out[member.name] = float(value) if value is not None else 0.0
    return out


def _percent_to_seconds(percent: Mapping[str, Any], total: float) -> Dict[str, Any]:
    return {name: ({k: v * total / 100.0 for k, v in value.items()} if isinstance(value, dict)
                   else value * total / 100.0) for name, value in percent.items()}


def reference_job_goodput(payloads: Payloads, query_time: TimeLike,
                          checkpoint_entries: Optional[Payloads] = None, *,
                          configured_ideal_step_time: Optional[float] = None,
                          job_name: Optional[str] = None) -> Dict[str, Any]:
    """Cumulative goodput as the reference computes it at ``query_time``.

    Args:
      payloads: reference-format payloads in write order (one job).
      query_time: the frozen "now" (POSIX seconds or datetime); entries written
        after it are not read, and an open job's total time runs up to it.
      checkpoint_entries: Orbax statistics dicts to merge into the stream.
      configured_ideal_step_time: passed to ``get_job_goodput``.
      job_name: the job to query; default the first payload's ``job_name``.

    Returns:
      ``goodput_percent``, ``productive_seconds``, ``total_seconds``,
      ``badput_seconds``/``badput_percent`` (every BadputType name -> float;
      ``CUSTOM_BADPUT_EVENTS`` a dict by upper-cased type), ``reported_buckets``
      (names in the reference's own seconds dict), ``max_productive_step``,
      ``last_recorded_step``, ``disruptions``, ``ideal_step_time``,
      ``step_deviations`` and ``raw`` (the reference's return values).

    Raises:
      ValueError: as the reference (zero total, productive time out of range).
    """
    with _reference_session(payloads, checkpoint_entries, query_time, job_name) as (calc, _):
        result = calc.get_job_goodput(include_badput_breakdown=True,
                                      configured_ideal_step_time=configured_ideal_step_time)
        details = calc.get_job_goodput_details()
        info = calc._goodput_cache.get_goodput_info()  # pylint: disable=protected-access
    goodput_pct, breakdown, max_step = result
    badput_seconds = details["badput_time"]
    return {
        "goodput_percent": float(goodput_pct),
        "productive_seconds": float(details["goodput_time"][_ref_utils.GoodputType.TOTAL]),
        "total_seconds": float(details["total_elapsed_time"]),
        "badput_seconds": _by_name(badput_seconds),
        "badput_percent": _by_name(breakdown),
        "reported_buckets": frozenset(m.name for m in badput_seconds),
        "max_productive_step": int(max_step),
        "last_recorded_step": int(info.last_recorded_step),
        "disruptions": int(details["disruption_count"]),
        "ideal_step_time": float(details["ideal_step_time"]) or None,
        "step_deviations": {int(k): float(v) for k, v in details["step_time_deviation"].items()},
        "raw": {"get_job_goodput": result, "get_job_goodput_details": details},
    }


def reference_interval_goodput(payloads: Payloads, start: TimeLike, end: TimeLike,
                               checkpoint_entries: Optional[Payloads] = None, *,
                               job_name: Optional[str] = None) -> Dict[str, Any]:
    """Goodput of the window ``[start, end]`` as the reference computes it.

    The reference reads only entries written in ``(start, end]``, then clips
    the window to its first and last entry (``window_start``/``window_end``).

    Args:
      payloads, checkpoint_entries, job_name: as :func:`reference_job_goodput`.
      start, end: the window (POSIX seconds or datetimes); the clock is frozen
        at ``end``.

    Returns:
      ``goodput_percent``, ``badput_percent``, ``total_seconds`` (clipped
      window), ``window_start``/``window_end``, ``productive_seconds`` and
      ``badput_seconds`` (from the percents), ``max_productive_step``,
      ``disruptions``, ``raw``.

    Raises:
      ValueError: no entry in the window, or an empty clipped window.
    """
    start_dt, end_dt = _to_datetime(start), _to_datetime(end)
    with _reference_session(payloads, checkpoint_entries, end_dt, job_name) as (calc, _):
        result = calc.get_job_goodput_interval(start_dt, end_dt)
        window = (calc._interval_start_time, calc._interval_end_time)  # pylint: disable=protected-access
    goodput_pct, breakdown, max_step, total, disruptions = result
    percent = _by_name(breakdown)
    return {
        "goodput_percent": float(goodput_pct),
        "badput_percent": percent,
        "total_seconds": float(total),
        "window_start": window[0].timestamp(),
        "window_end": window[1].timestamp(),
        "productive_seconds": float(goodput_pct) * float(total) / 100.0,
        "badput_seconds": _percent_to_seconds(percent, float(total)),
        "max_productive_step": int(max_step),
        "disruptions": int(disruptions),
        "raw": {"get_job_goodput_interval": result},
    }


def reference_step_deviation(payloads: Payloads, query_time: Optional[TimeLike] = None, *,
                             configured_ideal_step_time: Optional[float] = None,
                             job_name: Optional[str] = None) -> Dict[str, Any]:
    """Step-time deviations as the reference's ``get_step_deviation`` gives them.

    Args:
      payloads, job_name: as :func:`reference_job_goodput`.
      query_time: frozen "now"; default just after the last payload.
      configured_ideal_step_time: passed through.

    Returns:
      ``step_deviations`` ({step: seconds}) and ``ideal_step_time``.

    Raises:
      ValueError: no step times or no ideal step time (all steps under 1 s).
    """
    if query_time is None:
        times = [t for t in map(entry_timestamp, payloads) if t is not None]
        query_time = (max(times) if times else time.time()) + 1.0
    with _reference_session(payloads, None, query_time, job_name) as (calc, _):
        deviations = calc.get_step_deviation(configured_ideal_step_time)
        info = calc._goodput_cache.get_step_info()  # pylint: disable=protected-access
    return {"step_deviations": {int(k): float(v) for k, v in deviations.items()},
            "ideal_step_time": float(info.ideal_step_time)}


def reference_job_goodput_with_exclusions(
        payloads: Payloads, query_time: TimeLike, exclusions: Sequence[Tuple[TimeLike, TimeLike]],
        checkpoint_entries: Optional[Payloads] = None, *,
        job_name: Optional[str] = None) -> Dict[str, Any]:
    """``get_job_goodput_with_exclusions`` of the reference.

    Args:
      payloads, query_time, checkpoint_entries, job_name: as
        :func:`reference_job_goodput`.
      exclusions: (start, end) pairs; converted to aware UTC datetimes (the
        reference silently skips any other tzinfo).

    Returns:
      ``goodput_percent``, ``badput_percent``, ``max_productive_step``,
      ``excluded_seconds``; from the details ``total_seconds`` (adjusted),
      ``productive_seconds``, ``badput_seconds`` (zeros when the adjusted
      total is zero); ``raw``.
    """
    intervals = [(_to_datetime(a), _to_datetime(b)) for a, b in exclusions]
    with _reference_session(payloads, checkpoint_entries, query_time, job_name) as (calc, _):
        result = calc.get_job_goodput_with_exclusions(intervals, include_badput_breakdown=True)
        details = calc.get_job_goodput_details()
    goodput_pct, breakdown, max_step, excluded = result
    productive = details["goodput_time"].get(_ref_utils.GoodputType.TOTAL, 0.0)
    return {
        "goodput_percent": float(goodput_pct),
        "badput_percent": _by_name(breakdown),
        "max_productive_step": int(max_step),
        "excluded_seconds": float(excluded),
        "total_seconds": float(details["total_elapsed_time"]),
        "productive_seconds": float(productive),
        "badput_seconds": _by_name(details["badput_time"]),
        "raw": {"get_job_goodput_with_exclusions": result, "get_job_goodput_details": details},
    }
