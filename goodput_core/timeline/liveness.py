"""Liveness: running, stopped or ended (semantics.md rule 15).

The lead writer records a heartbeat every ``heartbeat_seconds`` (10 s by
default, ``GOODPUT_HEARTBEAT_SECONDS``). The last attempt of a run, while it
has no job end, is **stopped**

* when its last event is a recorded disruption (Ctrl-C, SIGTERM, a crash):
  stopped at that disruption, whatever heartbeats follow it (one written
  while the process exits does not reopen it);
* when it has heartbeats and its last sign of life (any event or heartbeat)
  is older than :data:`STALE_INTERVALS` heartbeat intervals at the query
  time (SIGKILL, a lost host): stopped at that last sign of life.

A stopped attempt's lifetime ends where it stopped, so its figures do not
change however late they are read. Without heartbeats and without a final
disruption (logs of the reference, or of older versions) an open attempt
runs to the query time (rule 1). For every attempt followed by a restart
(no job end, a later job start) the time from its last sign of life to the
restart is reported (:class:`Restart`).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
from typing import Optional, Tuple

import numpy as np

from goodput_core.timeline.segments import Attempts

__all__ = ["RunState", "Restart", "run_state", "attempt_lives", "STALE_INTERVALS",
           "DEFAULT_HEARTBEAT_SECONDS", "NO_SIGN_OF_LIFE", "RUNNING", "STOPPED", "ENDED"]

STALE_INTERVALS = 3
DEFAULT_HEARTBEAT_SECONDS = 10.0  # when a heartbeat does not say its interval
NO_SIGN_OF_LIFE = "no sign of life"
RUNNING, STOPPED, ENDED, NOT_STARTED = "running", "stopped", "ended", "not started"
_NAN = math.nan
# event tables that are not the last event's sign of life: heartbeats and
# disruptions are read apart, Orbax entries by their end; a scheduler's
# submissions and grants are not the process's
# (and the stalls carved from the lead's steps: no event of the lead's)
_SKIP = ("heartbeat", "disruption", "orbax", "submitted", "granted", "carved")


@dataclasses.dataclass(frozen=True)
class Restart:
    """An attempt that ended without a job end and was restarted.

    Attributes:
      restart_time: the next attempt's job start.
      last_sign_of_life: the crashed attempt's last event or heartbeat (its
        disruption when that was its last event); NaN when it recorded none.
      seconds: ``restart_time - last_sign_of_life``.
      cause: the disruption's cause when one was the last event, else None.
    """

    restart_time: float
    last_sign_of_life: float
    seconds: float
    cause: Optional[str]


@dataclasses.dataclass(frozen=True)
class RunState:
    """Where a run stands at a query time.

    Attributes:
      state: ``"running"``, ``"stopped"``, ``"ended"`` (a job end closes the
        last attempt) or ``"not started"`` (no job start yet).
      stopped_at: where a stopped run's lifetime ends (None otherwise).
      cause: why it stopped: the disruption's cause, or ``"no sign of life"``.
      last_sign_of_life: the last event or heartbeat of the last attempt.
      heartbeat_seconds: the lead writer's interval (None: no heartbeat seen).
      restarts: per restart, the time from the last sign of life to it.
    """

    state: str
    stopped_at: Optional[float] = None
    cause: Optional[str] = None
    last_sign_of_life: Optional[float] = None
    heartbeat_seconds: Optional[float] = None
    restarts: Tuple[Restart, ...] = ()

    @property
    def stopped(self) -> bool:
        return self.state == STOPPED

    def describe(self) -> str:
        """``"stopped at <ISO time> (<cause>)"``, ``"running"`` or ``"ended"``."""
        if not self.stopped:
            return self.state
        when = _dt.datetime.fromtimestamp(round(self.stopped_at, 3), tz=_dt.timezone.utc)
        spec = "seconds" if when.microsecond == 0 else "milliseconds"
        return (f"stopped at {when.replace(tzinfo=None).isoformat(timespec=spec)}Z "
                f"({self.cause})")


@dataclasses.dataclass(frozen=True)
class AttemptLives:
    """Per attempt: last event (heartbeats apart), last heartbeat and its
    interval, and the disruption that was its last event (NaN / None)."""

    last_event: np.ndarray
    last_heartbeat: np.ndarray
    interval: np.ndarray
    final_disruption: np.ndarray
    cause: Tuple[Optional[str], ...]

    def last_signs(self) -> np.ndarray:
        """:meth:`last_sign` of every attempt."""
        return np.where(~np.isnan(self.final_disruption), self.final_disruption,
                        np.fmax(self.last_event, self.last_heartbeat))

    def last_sign(self, a: int) -> float:
        """Attempt ``a``'s last sign of life (its final disruption first)."""
        if not math.isnan(self.final_disruption[a]):
            return float(self.final_disruption[a])
        return float(np.fmax(self.last_event[a], self.last_heartbeat[a]))


def _last_in(t: np.ndarray, values: np.ndarray, lo: np.ndarray, hi: np.ndarray
             ) -> Tuple[np.ndarray, np.ndarray]:
    """``(value, index)`` of the last sorted time in each ``[lo, hi)`` (NaN, -1 if none)."""
    if not len(t):
        return np.full(len(lo), _NAN), np.full(len(lo), -1)
    j = np.searchsorted(t, hi, side="left") - 1
    jj = np.maximum(j, 0)
    ok = (j >= 0) & (t[jj] >= lo)
    return np.where(ok, values[jj], _NAN), np.where(ok, j, -1)


def attempt_lives(tables, att: Attempts) -> AttemptLives:
    """The signs of life of every attempt (see :class:`AttemptLives`)."""
    lo = att.start
    hi = np.where(np.isnan(att.next_start), np.inf, att.next_start)
    last = np.full(len(lo), _NAN)
    for name, table in tables.tables.items():
        if name in _SKIP or not len(table):
            continue
        last = np.fmax(last, _last_in(table["t"], table["t"], lo, hi)[0])
    ob = tables["orbax"]
    if len(ob):  # an Orbax entry is written when its span ends
        last = np.fmax(last, _last_in(ob["t"], np.maximum.accumulate(ob["end"]), lo, hi)[0])
    hb = tables["heartbeat"]
    last_hb, j = _last_in(hb["t"], hb["t"], lo, hi)
    iv = np.where(j >= 0, hb["val"][np.maximum(j, 0)] if len(hb) else _NAN, _NAN)
    iv = np.where(np.isnan(iv), DEFAULT_HEARTBEAT_SECONDS, iv)
    d = tables["disruption"]
    last_d, k = _last_in(d["t"], d["t"], lo, hi)
    final = np.where(~np.isnan(last_d) & ~(last > last_d), last_d, _NAN)
    names = tables.names["disruption"]
    cause = tuple(names[int(d["key"][i])] if i >= 0 and not math.isnan(f) else None
                  for i, f in zip(k.tolist(), final.tolist()))
    return AttemptLives(last, last_hb, iv, final, cause)


def restarts_of(att: Attempts, lives: AttemptLives) -> Tuple[Restart, ...]:
    """Each restart after an attempt that did not end, with that attempt's last sign of life."""
    restarts = []
    for a in np.flatnonzero(np.isnan(att.end[:-1])).tolist():
        sign = lives.last_sign(a)
        restart = float(att.next_start[a])
        restarts.append(Restart(restart, sign, restart - sign if not math.isnan(sign) else _NAN,
                                lives.cause[a]))
    return tuple(restarts)


def run_state(tables, att: Attempts, now: float, lives: Optional[AttemptLives] = None,
              restarts: Optional[Tuple[Restart, ...]] = None) -> RunState:
    """The run's state at ``now`` (rule 15; module docstring). ``lives`` and
    ``restarts``: those of ``att`` when the caller keeps them."""
    n = len(att)
    if not n:
        return RunState(NOT_STARTED)
    lives = attempt_lives(tables, att) if lives is None else lives
    restarts_t = restarts_of(att, lives) if restarts is None else restarts
    a = n - 1
    hb = lives.last_heartbeat[a]
    interval = None if math.isnan(hb) else float(lives.interval[a])
    sign = lives.last_sign(a)
    common = dict(last_sign_of_life=None if math.isnan(sign) else sign,
                  heartbeat_seconds=interval, restarts=restarts_t)
    if not math.isnan(att.end[a]):
        return RunState(ENDED, **common)
    if not math.isnan(lives.final_disruption[a]):
        return RunState(STOPPED, sign, lives.cause[a], **common)
    if interval is not None and now - sign > STALE_INTERVALS * interval:
        return RunState(STOPPED, sign, NO_SIGN_OF_LIFE, **common)
    return RunState(RUNNING, **common)


def timeline_state(tl, now: float) -> RunState:
    """:func:`run_state` of a :class:`~goodput_core.timeline.spans.Timeline`
    (brought up to date by the caller); with ``tl.liveness`` off (the
    compatibility paths: rule 1 as the reference) nothing is ever stopped."""
    T = tl.tables
    key = (tl.version, tuple(len(t) for t in T.tables.values()))
    if tl.lives_cache is None or tl.lives_cache[0] != key:
        lives = attempt_lives(T, tl.attempts) if len(tl.attempts) else None
        # (the restarts too: a monitor cycle asks several times, a Python loop per restart)
        tl.lives_cache = (key, lives, restarts_of(tl.attempts, lives) if lives else None)
    st = run_state(T, tl.attempts, now, tl.lives_cache[1], tl.lives_cache[2])
    if st.stopped and not tl.liveness:
        return dataclasses.replace(st, state=RUNNING, stopped_at=None, cause=None)
    return st


def lifetime_end(tl, now: float) -> float:
    """The last job end; where a stopped last attempt stopped; else ``now``."""
    att = tl.attempts
    if not math.isnan(att.end[-1]):
        return float(att.end[-1])
    st = timeline_state(tl, now)
    return float(st.stopped_at) if st.stopped else float(now)
