"""Incidents: what each disruption cost, how fast it was seen and recovered.

One incident per restart (a job start after an attempt that crashed, or after
a recorded disruption), and an **open** incident for a run that stopped and
was not restarted (semantics rule 15: a recorded disruption last, or no sign
of life for three heartbeat intervals): ``open`` is True, ``restarted``,
``first_step`` and the times to them are None, and nothing is lost or
recovered yet (the restart decides that). For each:

* ``cause``: the recorded cause (``preemption``, ``sigterm``,
  ``exception:<Type>``...), ``hang`` when a hang was open when the attempt
  ended, ``requeued by the scheduler`` when only a requeue was recorded,
  ``no sign of life (killed, or the host was lost)`` when the heartbeats stopped
  (semantics rule 15), else ``unknown (no job end)``;
* ``seen_by``: the process index and host that recorded the disruption
  (None when nothing was recorded);
* ``last_progress``: the last step start or end before the failure;
* ``detected``: when the failure was known: the recorded disruption, else
  the hang's detection, else the scheduler's requeue (a ``job_submitted``
  after the failure), else 3 heartbeat intervals after the last sign of life
  (the liveness rule), else the next job start;
* ``time_to_detect`` = detected - last progress; ``time_to_restart`` = next
  job start - detected; ``time_to_first_step`` = next job start -> the first
  step of the new attempt starts (its init, preparation, restore and compile);
* ``lost_seconds`` (wasted progress: steps redone) and ``lost_steps``
  (last step started before the failure - the restart step + 1, at least 0);
* ``recovery_seconds``: infrastructure recovery charged to the gap, and
  ``scheduling_seconds``: the requeue's wait for resources inside it (carved
  out of recovery, see :mod:`goodput_core.queries.scheduling`).

Per run: ``mtbf_seconds`` (runtime total / incidents, as the checkpoint
advice's M), ``mttr_seconds`` (mean of last progress -> first step of the new
attempt), badput (lost + recovery seconds) by cause and by the host that saw
it, and ``suspect_hosts``: hosts that saw two or more incidents.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from goodput_core.queries.markers import run_markers
from goodput_core.timeline.liveness import NO_SIGN_OF_LIFE, STALE_INTERVALS, attempt_lives

__all__ = ["Incident", "IncidentSummary", "incidents"]


@dataclasses.dataclass(frozen=True)
class Incident:
    """One disruption and the restart that followed (see the module docstring)."""

    attempt: int                 # the attempt that failed (1-based)
    cause: str
    seen_by: Optional[Tuple[int, str]]
    last_progress: Optional[float]
    detected: float
    restarted: Optional[float]   # the next attempt's job start (None: open)
    first_step: Optional[float]  # the new attempt's first step start
    time_to_detect: Optional[float]
    time_to_restart: Optional[float]
    time_to_first_step: Optional[float]
    lost_seconds: float
    lost_steps: int
    recovery_seconds: float
    scheduling_seconds: float = 0.0  # the requeue's wait for resources (not recovery)
    open: bool = False           # the run stopped and was not restarted (yet)


@dataclasses.dataclass(frozen=True)
class IncidentSummary:
    """A run's incidents and the figures over them."""

    incidents: List[Incident]
    mtbf_seconds: Optional[float]
    mttr_seconds: Optional[float]
    badput_by_cause: Dict[str, float]
    badput_by_host: Dict[str, float]
    suspect_hosts: List[str]

    def to_json(self) -> Dict[str, Any]:
        """A JSON-ready dict (times in POSIX seconds)."""
        return {
            "incidents": [dataclasses.asdict(i) for i in self.incidents],
            "mtbf_seconds": self.mtbf_seconds, "mttr_seconds": self.mttr_seconds,
            "badput_by_cause": dict(self.badput_by_cause),
            "badput_by_host": dict(self.badput_by_host),
            "suspect_hosts": list(self.suspect_hosts),
        }


def _host_name(seen: Optional[Tuple[int, str]]) -> str:
    if seen is None:
        return "unknown"
    index, host = seen
    return f"{index} ({host})" if host else str(index)


def _sum_in(arrays: Dict[str, Tuple[np.ndarray, np.ndarray]], label: str,
            a: float, b: float) -> float:
    s, e = arrays.get(label, (np.empty(0), np.empty(0)))
    return float((np.clip(e, a, b) - np.clip(s, a, b)).sum())


def _last_at_or_before(limit: float, *times: np.ndarray) -> Optional[float]:
    """The latest time at or before ``limit`` in any of the sorted arrays
    (each searched apart: not merged into a copy of the run's length)."""
    found = [float(t[k]) for t in times
             for k in [int(np.searchsorted(t, limit, side="right")) - 1] if k >= 0]
    return max(found) if found else None


def incidents(calc: Any, now: float) -> IncidentSummary:
    """The incidents of ``calc``'s run at ``now``."""
    tl = calc.timeline
    att = tl.attempts
    starts, ends = att.start.tolist(), att.end.tolist()
    dis = tl.tables["disruption"]
    dis_t, dis_key = dis["t"].tolist(), dis["key"].tolist()
    causes = tl.tables.names["disruption"]
    writers = {round(t, 6): (p, h) for t, p, h in tl.tables.disruption_writers}
    st = tl.tables["step_start"]
    st_t, st_step = np.asarray(st["t"]), np.asarray(st["step"])
    se = tl.tables["step_end"]
    se_t = np.asarray(se["t"])
    restart_steps = {round(m.t, 6): m.step for m in _restart_markers(calc)}
    hangs = calc.hangs(now)
    arrays = calc.span_arrays(now=now)
    state = calc.state(now) if callable(getattr(calc, "state", None)) else None
    lives = {round(r.restart_time, 6): r for r in getattr(state, "restarts", ())}
    signs = attempt_lives(tl.tables, att)  # per attempt: its last heartbeat and interval
    waits = calc.scheduling(now)
    out: List[Incident] = []
    for i in range(1, len(starts)):
        prev, start = starts[i - 1], starts[i]
        in_gap = [(t, k) for t, k in zip(dis_t, dis_key) if prev <= t <= start]
        crashed = math.isnan(ends[i - 1])
        if not in_gap and not crashed:
            continue  # a clean job end, then a new attempt: no incident
        fail_t = in_gap[0][0] if in_gap else None
        limit = fail_t if fail_t is not None else start
        last = _last_at_or_before(limit, st_t, se_t)
        last = last if last is not None and last >= prev else None
        hang = next((h for h in hangs if prev <= h.detected <= start), None)
        if in_gap:
            key = in_gap[0][1]
            cause = causes[key] if 0 <= key < len(causes) else "unknown"
            detected = fail_t
            seen = writers.get(round(fail_t, 6))
        elif hang is not None:
            cause, detected, seen = "hang", hang.detected, None
        else:
            # nothing recorded: the scheduler's requeue is when it was known, else
            # the next job start
            # (after the attempt's own start: schedulers keep whole seconds, so a
            # requeue may read a little earlier than the last step recorded)
            requeue = [a for a, _ in waits.waits if prev <= a <= start]
            life = lives.get(round(start, 6))
            seen = None
            if requeue:
                detected, cause = requeue[0], "requeued by the scheduler"
            elif life is not None and math.isfinite(life.last_sign_of_life) and \
                    not math.isnan(signs.last_heartbeat[i - 1]):
                # the liveness rule's detection: 3 heartbeat intervals of silence
                beat = float(signs.interval[i - 1])
                detected = min(life.last_sign_of_life + 3 * beat, start)
                cause = "no sign of life (killed, or the host was lost)"
            else:
                detected, cause = start, "unknown (no job end)"
        j = int(np.searchsorted(st_t, start, side="left"))
        nxt = starts[i + 1] if i + 1 < len(starts) else math.inf
        first = float(st_t[j]) if j < len(st_t) and st_t[j] < nxt else None
        r_step = restart_steps.get(round(first, 6)) if first is not None else None
        kk = int(np.searchsorted(st_t, limit, side="right")) - 1
        last_step = int(st_step[kk]) if kk >= 0 and st_t[kk] >= prev else None
        lost_steps = (max(last_step - r_step + 1, 0)
                      if last_step is not None and r_step is not None else 0)
        sched = waits.seconds(prev, start)
        # the spans carve scheduling waits out of recovery already (SCHEDULING)
        recovery = _sum_in(arrays, "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION", prev, start)
        out.append(Incident(
            attempt=i, cause=cause, seen_by=seen, last_progress=last, detected=float(detected),
            restarted=float(start), first_step=first,
            time_to_detect=None if last is None else max(float(detected) - last, 0.0),
            time_to_restart=max(float(start) - float(detected), 0.0),
            time_to_first_step=None if first is None else first - float(start),
            lost_seconds=_sum_in(arrays, "WASTED_PROGRESS_FROM_DISRUPTION", prev, start),
            lost_steps=lost_steps,
            recovery_seconds=max(recovery, 0.0), scheduling_seconds=sched))
    if getattr(state, "state", None) == "stopped" and getattr(state, "stopped_at", None) is not None:
        out.append(_open_incident(tl, len(starts), state, writers, st_t, se_t, signs))
    return _summary(calc, now, out)


def _open_incident(tl: Any, n: int, state: Any, writers: Dict[float, Any], st_t: np.ndarray,
                   se_t: np.ndarray, signs: Any) -> Incident:
    """The last attempt stopped and no restart followed (yet)."""
    stopped = float(state.stopped_at)
    start = float(tl.attempts.start[-1])
    last = _last_at_or_before(stopped, st_t, se_t)
    last = last if last is not None and last >= start else None
    if state.cause == NO_SIGN_OF_LIFE:
        # known once three heartbeat intervals passed in silence (the liveness rule)
        beat = float(signs.interval[n - 1])
        cause, detected, seen = "no sign of life (killed, or the host was lost)", \
            stopped + STALE_INTERVALS * beat, None
    else:
        cause, detected, seen = str(state.cause), stopped, writers.get(round(stopped, 6))
    return Incident(attempt=n, cause=cause, seen_by=seen, last_progress=last,
                    detected=detected, restarted=None, first_step=None,
                    time_to_detect=None if last is None else max(detected - last, 0.0),
                    time_to_restart=None, time_to_first_step=None, lost_seconds=0.0,
                    lost_steps=0, recovery_seconds=0.0, open=True)


def _restart_markers(calc: Any) -> List[Any]:
    return [m for m in run_markers(calc) if m.kind == "restart" and m.step is not None]


def _summary(calc: Any, now: float, out: List[Incident]) -> IncidentSummary:
    total = calc.cumulative(now).total_seconds
    mtbf = total / len(out) if out and total > 0 else None
    repairs = [i.first_step - i.last_progress for i in out  # (an open one: no repair yet)
               if i.first_step is not None and i.last_progress is not None]
    mttr = float(np.mean(repairs)) if repairs else None
    by_cause: Dict[str, float] = {}
    by_host: Dict[str, float] = {}
    seen_count: Dict[str, int] = {}
    for i in out:
        cost = i.lost_seconds + i.recovery_seconds
        by_cause[i.cause] = by_cause.get(i.cause, 0.0) + cost
        host = _host_name(i.seen_by)
        by_host[host] = by_host.get(host, 0.0) + cost
        if i.seen_by is not None:
            seen_count[host] = seen_count.get(host, 0) + 1
    suspects = sorted(h for h, n in seen_count.items() if n >= 2)
    return IncidentSummary(out, mtbf, mttr, by_cause, by_host, suspects)
