"""Scheduling times from schedulers: Slurm's ``sacct --json`` and Kubernetes events.

Each parser returns ``[(kind, time), ...]`` with kind ``"submitted"`` or
``"granted"`` (POSIX seconds), in time order; :func:`record_schedule` records
them on a Recorder (``job_submitted`` / ``resources_granted`` events).

**Slurm** (``sacct --json --duplicates -j JOBID``: every requeued instance is a
record of its own): per record, ``time.submission`` is when the job was
submitted or requeued (Slurm resets it on a requeue) and ``time.start`` when
its nodes were allocated and the batch script started: a submission and a
grant. Records not started yet (``PENDING``) contribute their submission only.
Both JSON shapes are read: plain integers (Slurm 22.05-23.02) and
``{"set": true, "number": N}`` (23.11 and later).

**Kubernetes** (``kubectl get events -o json``, or the ``items`` of the API):
the first event of the Job/JobSet (or of its Kueue ``Workload``) is the
submission; an eviction or preemption (reasons ``Evicted``, ``Preempted``,
``EvictedDueToPodsReadyTimeout``) or a JobSet restart (``Restarting``) is a
requeue; the grant of each attempt is the last pod ``Scheduled`` event before
the next requeue (every pod placed). An event's time is the first *valid* of
``eventTime``, ``firstTimestamp``, ``lastTimestamp`` and
``metadata.creationTimestamp``: Go's zero time (``0001-01-01T00:00:00Z``,
what an unset ``eventTime`` may read as) is no time.

**All or nothing.** Every time of the job is checked before any is returned
(so before anything is stored): a finite number of POSIX seconds from
:data:`EARLIEST` (2000-01-01) to a day after now, and per Slurm record
submission <= start <= end. One time that fails refuses the whole input with
a one-line :class:`SchedulerFormatError` naming the record and the field.
"""

from __future__ import annotations

import datetime
import json
import math
import time as _time
from typing import Any, Iterable, List, Mapping, Optional, Tuple

__all__ = ["parse_sacct_json", "parse_k8s_events", "record_schedule", "SchedulerFormatError",
           "EARLIEST", "LATEST_AHEAD_S"]

Times = List[Tuple[str, float]]

#: The earliest scheduling time taken (2000-01-01T00:00:00Z): before it, a
#: number is not a job's time (Go's zero time, a count mistaken for seconds).
EARLIEST = 946684800.0
#: How far past now (clock skew between the scheduler and this machine) a
#: time may be.
LATEST_AHEAD_S = 86400.0


class SchedulerFormatError(ValueError):
    """The scheduler's output is not what the parser reads (one line to show)."""


def _plausible(t: float, now: float) -> bool:
    return math.isfinite(t) and EARLIEST <= t <= now + LATEST_AHEAD_S


def _shown(t: float) -> str:
    if not math.isfinite(t):
        return repr(t)
    try:
        return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{t:g} s"


def _why_not(t: float, now: float) -> str:
    """Why ``t`` is no scheduling time (for a one-line error)."""
    return (f"{_shown(t)} is not a time between 2000-01-01 and a day from now "
            "(finite POSIX seconds)")


def _number(value: Any) -> Optional[float]:
    """A Slurm time: an int, or ``{"set": bool, "infinite": bool, "number": N}``;
    None when unset (0, ``set: false``, ``infinite``); NaN when not a number."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value) if value != 0 else None  # 0: not set (a pending job's start)


def parse_sacct_json(text: str, job_id: Optional[str] = None, *,
                     now: Optional[float] = None) -> Times:
    """Scheduling times of one Slurm job from ``sacct --json`` output.

    Args:
      text: the JSON text.
      job_id: the job to read (its array/het components included); None: every
        record in the output.
      now: POSIX seconds (default: the clock), the end of the plausible range.

    Raises:
      SchedulerFormatError: not sacct's JSON, no record of the job, or a time
        of one of its records that is not plausible (module docstring).
    """
    now = _time.time() if now is None else now
    try:
        doc = json.loads(text)
        jobs = doc["jobs"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SchedulerFormatError(f"not sacct --json output ({exc})") from None
    out: Times = []
    found = 0
    for job in jobs if isinstance(jobs, list) else ():
        if not isinstance(job, Mapping):
            continue
        if job_id is not None and str(job.get("job_id")) != str(job_id).split(".")[0]:
            continue
        found += 1
        t = job.get("time") if isinstance(job.get("time"), Mapping) else {}
        got = {key: _number(t.get(key)) for key in ("submission", "start", "end")}
        where = f"job {job.get('job_id')} (record {found})"
        for key, value in got.items():
            if value is not None and not _plausible(value, now):
                raise SchedulerFormatError(f"{where}: time.{key} {_why_not(value, now)}; "
                                           "nothing imported")
        order = [(k, v) for k, v in got.items() if v is not None]
        for (k1, v1), (k2, v2) in zip(order, order[1:]):
            if v1 > v2:
                raise SchedulerFormatError(f"{where}: time.{k1} ({_shown(v1)}) is after "
                                           f"time.{k2} ({_shown(v2)}); nothing imported")
        if got["submission"] is not None:
            out.append(("submitted", got["submission"]))
        if got["start"] is not None:
            out.append(("granted", got["start"]))
    if not found:
        raise SchedulerFormatError(f"no record of job {job_id} in the sacct output")
    return sorted(set(out), key=lambda kv: (kv[1], kv[0] != "submitted"))


_REQUEUE_REASONS = {"Evicted", "Preempted", "EvictedDueToPodsReadyTimeout", "Restarting"}
_OWNER_KINDS = {"Job", "JobSet", "Workload"}


_K8S_FIELDS = ("eventTime", "firstTimestamp", "lastTimestamp", "metadata.creationTimestamp")


def _k8s_time(ev: Mapping[str, Any], now: float) -> Tuple[Optional[float], str]:
    """(the event's time, '') from its first valid time field; (None, why) when
    it has time fields but none is valid; (None, '') when it has none."""
    meta = ev.get("metadata") if isinstance(ev.get("metadata"), Mapping) else {}
    raws = (ev.get("eventTime"), ev.get("firstTimestamp"), ev.get("lastTimestamp"),
            meta.get("creationTimestamp"))
    why = ""
    for field, raw in zip(_K8S_FIELDS, raws):
        if raw is None or raw == "":
            continue
        try:
            t = datetime.datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError, OSError):
            why = why or f"{field} {str(raw)[:40]!r} is not a time"
            continue
        if _plausible(t, now):
            return t, ""
        why = why or f"{field} {str(raw)[:40]!r}: {_why_not(t, now)}"
    return None, why


def _belongs(kind: Any, obj_name: str, name: str) -> bool:
    """The job's own object: itself, its pods and jobs (``<name>-...``), or its
    Kueue workload (``job-<name>-<hash>`` / ``jobset-<name>-<hash>``)."""
    if obj_name == name or obj_name.startswith(name + "-"):
        return True
    return kind == "Workload" and any(obj_name.startswith(f"{p}-{name}-")
                                      for p in ("job", "jobset"))


def parse_k8s_events(text: str, name: Optional[str] = None, *,
                     now: Optional[float] = None) -> Times:
    """Scheduling times of a Kubernetes Job/JobSet from its events.

    Args:
      text: ``kubectl get events -o json`` output (a List with ``items``) or a
        JSON array of events.
      name: the Job/JobSet name: events of it, of objects named ``<name>-...``
        (its jobs and pods) and of its Kueue workload. None: every event.
      now: POSIX seconds (default: the clock), the end of the plausible range.

    Raises:
      SchedulerFormatError: not a list of events, none of the job, or an
        event of the job with no valid time (module docstring).
    """
    now = _time.time() if now is None else now
    try:
        doc = json.loads(text)
        items = doc["items"] if isinstance(doc, Mapping) else doc
        if not isinstance(items, list):
            raise TypeError("no list of events")
    except (ValueError, KeyError, TypeError) as exc:
        raise SchedulerFormatError(f"not a list of Kubernetes events ({exc})") from None
    evs = []
    for ev in items:
        if not isinstance(ev, Mapping):
            continue
        obj = ev.get("involvedObject") or ev.get("regarding") or {}
        obj = obj if isinstance(obj, Mapping) else {}
        kind, obj_name = obj.get("kind"), str(obj.get("name", ""))
        if name is not None and not _belongs(kind, obj_name, name):
            continue
        t, why = _k8s_time(ev, now)
        if why:
            raise SchedulerFormatError(f"event {ev.get('reason')!r} of {kind!r} {obj_name!r}: "
                                       f"{why}; nothing imported")
        if t is not None:
            evs.append((t, kind, ev.get("reason")))
    if not evs:
        raise SchedulerFormatError(f"no events of {name or 'the job'} in the input")
    evs.sort(key=lambda e: e[0])
    out: Times = []
    owner = [t for t, kind, _ in evs if kind in _OWNER_KINDS]
    out.append(("submitted", owner[0] if owner else evs[0][0]))
    requeues = [t for t, kind, reason in evs if reason in _REQUEUE_REASONS]
    out.extend(("submitted", t) for t in requeues)
    bounds = [s for _, s in out] + [float("inf")]
    scheduled = [t for t, kind, reason in evs if kind == "Pod" and reason == "Scheduled"]
    for lo, hi in zip(bounds, bounds[1:]):
        inside = [t for t in scheduled if lo <= t < hi]
        if inside:
            out.append(("granted", max(inside)))
    return sorted(set(out), key=lambda kv: (kv[1], kv[0] != "submitted"))


def record_schedule(recorder: Any, times: Iterable[Tuple[str, float]]) -> int:
    """Records scheduling times on ``recorder``; returns how many."""
    n = 0
    for kind, t in times:
        if kind == "submitted":
            recorder.record_job_submitted(t)
        elif kind == "granted":
            recorder.record_resources_granted(t)
        else:
            raise ValueError(f"unknown scheduling time kind {kind!r}")
        n += 1
    return n
