"""Checkpoint-interval advice from the run's own failures (docs/insights.md).

The interval between checkpoints trades the cost of saving against the work
lost at each failure. With failures arriving at random (exponential
inter-arrival, mean time between failures ``M``), a blocking save cost ``C``
and a restart cost ``R``, the expected wall-clock time to get ``tau`` seconds
of work safely checkpointed is (Daly 2006, the complete first-order model)::

    T(tau) = M * exp(R / M) * (exp((tau + C) / M) - 1)

so the share of time lost is ``waste(tau) = 1 - tau / T(tau)``. Unlike the
first-order estimate ``C/tau + tau/(2M) + R/M`` it accounts for failures
during saves and during the restart itself, which matters away from the
optimum. The recommended interval is the ``tau`` that minimises ``waste``
(found numerically); Young's ``sqrt(2CM)`` (1974) and Daly's refinement
``sqrt(2CM) - C`` are given beside it for reference: near the optimum the
curve is flat and all three agree closely.

Inputs, from the run itself:

* ``M`` = total time / disruptions (a note says the estimate is rough with
  fewer than 3 failures);
* ``C`` = mean blocking save time: the partition's save seconds inside the
  completed saves / completed saves (a save cut by a failure counts in
  neither);
* ``R`` = mean per restart of infrastructure recovery, plus the restore,
  init, preparation and program startup of each attempt after the first,
  up to its second step;
* the current interval = the work between saves: the median time between
  consecutive completed save starts in one attempt, less ``C`` (the model's
  ``tau`` excludes the save); steps per interval = seconds / ideal step time.

No advice, with a reason, without failures or without saves.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from goodput_core.timeline.buckets import BadputType as B
from goodput_core.timeline.ingest import ORBAX_RESTORE
from goodput_core.timeline.intervals import union

__all__ = ["CheckpointAdvice", "advise", "waste", "best_interval", "advice_of_run"]

_RESTART_BUCKETS = (B.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME, B.TPU_INITIALIZATION,
                    B.TRAINING_PREP, B.PROGRAM_STARTUP)


def waste(tau: float, mtbf: float, save: float, restart: float) -> float:
    """Expected share of wall-clock time lost with interval ``tau`` (0-1)."""
    if not (tau > 0 and mtbf > 0):
        return 1.0
    x = (tau + save) / mtbf
    try:
        t = mtbf * math.exp(restart / mtbf) * math.expm1(x)
    except OverflowError:
        return 1.0
    return max(0.0, 1.0 - tau / t) if t > 0 else 1.0


def best_interval(mtbf: float, save: float, restart: float) -> float:
    """The ``tau`` minimising :func:`waste` (golden-section search; convex)."""
    lo, hi = max(save, mtbf, 1e-9) * 1e-4, 10.0 * mtbf
    g = (math.sqrt(5) - 1) / 2
    a, b = math.log(lo), math.log(hi)  # search in log space: the scales differ widely
    c, d = b - g * (b - a), a + g * (b - a)
    for _ in range(200):
        if waste(math.exp(c), mtbf, save, restart) < waste(math.exp(d), mtbf, save, restart):
            b = d
        else:
            a = c
        c, d = b - g * (b - a), a + g * (b - a)
        if b - a < 1e-9:
            break
    return math.exp((a + b) / 2)


@dataclasses.dataclass(frozen=True)
class CheckpointAdvice:
    """What the run's failures and saves say about its checkpoint interval.

    Attributes:
      available: False when no advice can be given (``reason`` says why).
      reason: why not, or a note on the estimate's confidence ("" if none).
      disruptions, saves: what the estimate rests on.
      mtbf_seconds, save_seconds, restart_seconds: M, C and R.
      step_seconds: the ideal step time (None: unknown).
      current_interval_seconds / _steps: the work between saves, the median
        time between save starts less the save time (None with fewer than
        two saves in one attempt).
      recommended_interval_seconds / _steps: the optimum of the model.
      young_interval_seconds, daly_interval_seconds: the closed forms.
      waste_now, waste_recommended: expected shares of time lost (0-1).
      goodput_gain_points: ``100 x (waste_now - waste_recommended)``.
    """

    available: bool
    reason: str
    disruptions: int = 0
    saves: int = 0
    mtbf_seconds: Optional[float] = None
    save_seconds: Optional[float] = None
    restart_seconds: Optional[float] = None
    step_seconds: Optional[float] = None
    current_interval_seconds: Optional[float] = None
    current_interval_steps: Optional[float] = None
    recommended_interval_seconds: Optional[float] = None
    recommended_interval_steps: Optional[float] = None
    young_interval_seconds: Optional[float] = None
    daly_interval_seconds: Optional[float] = None
    waste_now: Optional[float] = None
    waste_recommended: Optional[float] = None
    goodput_gain_points: Optional[float] = None


def advise(mtbf: float, save: float, restart: float, *, current: Optional[float] = None,
           step: Optional[float] = None, disruptions: int = 0, saves: int = 0,
           note: str = "") -> CheckpointAdvice:
    """The advice for given M, C, R (and the current interval, if known)."""
    best = best_interval(mtbf, save, restart)
    young = math.sqrt(2 * save * mtbf)
    daly = young - save if save < mtbf / 2 else mtbf
    w_best = waste(best, mtbf, save, restart)
    w_now = waste(current, mtbf, save, restart) if current else None
    per_step = (lambda s: s / step) if step else (lambda s: None)
    return CheckpointAdvice(
        True, note, disruptions, saves, mtbf, save, restart, step, current,
        per_step(current) if current else None, best, per_step(best), young, daly, w_now, w_best,
        None if w_now is None else 100.0 * (w_now - w_best))


def advice_of_run(tl, result, stats) -> CheckpointAdvice:
    """The advice for a run from its timeline, cumulative result and step stats."""
    n_fail = int(result.disruptions)
    starts, ends = completed_saves(tl)
    if n_fail == 0:
        return CheckpointAdvice(False, "no failures recorded: nothing to weigh saves against",
                                0, len(starts))
    if not len(starts):
        return CheckpointAdvice(False, "no checkpoint saves recorded", n_fail, 0)
    total = result.total_seconds
    mtbf = total / n_fail
    # C: the partition's save seconds inside the completed saves only (a save
    # cut by a failure is neither a save nor a save second).
    us, ue = union(starts, ends)
    save = tl.measure(us, ue).get(int(B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME), 0.0) / len(starts)
    restart = (result.badput_seconds[B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION]
               + _after_restarts(tl, result.lifetime[1])) / n_fail
    gaps = np.diff(starts)
    att = np.searchsorted(tl.attempts.start, starts, side="right")
    gaps = gaps[(att[1:] == att[:-1]) & (gaps > 0)]
    # The model's interval is the work between saves: the save itself is not in it.
    current = max(float(np.median(gaps)) - save, 0.0) if len(gaps) else None
    note = "" if n_fail >= 3 else f"rough: only {n_fail} failure(s) seen"
    return advise(mtbf, save, restart, current=current or None, step=stats.ideal_step_time,
                  disruptions=n_fail, saves=len(starts), note=note)


def completed_saves(tl):
    """``(starts, ends)`` of the run's completed checkpoint saves, by start:
    Orbax save entries, and explicit save starts followed by their end in
    the same attempt. A save whose end never came (cut by a failure) is left
    out."""
    T = tl.tables
    ob = T["orbax"]
    is_save = ob["key"] != ORBAX_RESTORE  # local and persistent saves
    t, e = T["save"]["t"], T["save"]["e"]
    att = np.searchsorted(tl.attempts.start, t, side="right")
    paired = np.flatnonzero((e[:-1] == 0) & (e[1:] == 1) & (att[:-1] == att[1:]))
    starts = np.concatenate((ob["t"][is_save], t[paired]))
    ends = np.concatenate((ob["end"][is_save], t[paired + 1]))
    order = np.argsort(starts, kind="stable")
    return starts[order], ends[order]


def _after_restarts(tl, life_end: float) -> float:
    """Restore, init, preparation and startup of every attempt after the first,
    from its job start to its second step start (the lifetime's end at the
    latest: a phase still open runs to the query time, rule 14)."""
    starts = tl.attempts.start
    steps = tl.tables["step_start"]["t"]
    if len(starts) < 2:
        return 0.0
    a = starts[1:]
    j = np.searchsorted(steps, a, side="left") + 1
    nxt = np.append(starts[2:], np.inf)
    b = np.where(j < len(steps), steps[np.minimum(j, len(steps) - 1)], nxt)
    b = np.minimum(np.minimum(b, nxt), life_end)
    got = tl.measure(a, np.maximum(a, b))
    return float(sum(got.get(int(k), 0.0) for k in _RESTART_BUCKETS))
