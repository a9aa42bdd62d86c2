"""A synthetic training job, recorded with backfilled timestamps.

Used by ``goodput demo`` when no ML framework is installed and by examples:
it plays a job with known phase durations (accelerator init, preparation, a
compile-heavy first step, steps with data loading, checkpoints, an
evaluation, a crash, a recovery gap and a restart from the last checkpoint)
through the public recorder API, instantly (no sleeping).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from goodput_core.recorder import Recorder

__all__ = ["SyntheticJob", "record_synthetic_job"]


@dataclass(frozen=True)
class SyntheticJob:
    """Phase durations of the synthetic job, in seconds."""

    tpu_init: float = 5.0
    training_prep: float = 3.0
    compile_excess: float = 4.0   # extra time of each attempt's first step
    step: float = 1.0
    data_loading: float = 0.1     # the sync load before the first step
    checkpoint_every: int = 10
    checkpoint_save: float = 0.5
    eval_at_step: int = 15
    eval_time: float = 2.0
    steps: int = 30
    crash_at_step: int = 25       # the job dies while running this step
    recovery_gap: float = 20.0    # from the crash to the next job start


def _attempt(rec: Recorder, job: SyntheticJob, t: float, first: int, last: int,
             crash: bool) -> float:
    """Records one attempt starting at ``t``; returns the time it ends."""
    rec.record_job_start_time(t)
    rec.record_tpu_init_start_time(t)
    t += job.tpu_init
    rec.record_tpu_init_end_time(t)
    rec.record_training_preparation_start_time(t)
    t += job.training_prep
    rec.record_training_preparation_end_time(t)
    rec.record_data_loading_start_time(t)
    t += job.data_loading
    rec.record_data_loading_end_time(t)
    for k in range(first, last):
        rec.record_step_start_time(k, t)
        t += job.step + (job.compile_excess if k == first else 0.0)
        if crash and k == last - 1:
            rec.record_disruption("exception:SimulatedCrash", t)
            return t
        if k == job.eval_at_step:
            rec.record_custom_badput_event_start_time(t, "eval")
            t += job.eval_time
            rec.record_custom_badput_event_end_time(t, "eval")
        if job.checkpoint_every and (k + 1) % job.checkpoint_every == 0:
            rec.record_checkpoint_save_start_time(k + 1, t)
            t += job.checkpoint_save
            rec.record_checkpoint_save_end_time(k + 1, t)
    rec.record_step_end_time(last - 1, t)
    rec.record_job_end_time(t)
    return t


def record_synthetic_job(rec: Recorder, start: float,
                         job: SyntheticJob = SyntheticJob()) -> Dict[str, float]:
    """Records the job on ``rec`` starting at POSIX time ``start``.

    Returns:
      {"start": ..., "end": ..., "restart_step": ...} of what was played.
    """
    t = _attempt(rec, job, start, 0, job.crash_at_step + 1, crash=True)
    every = job.checkpoint_every
    restart = (job.crash_at_step // every) * every if every else 0
    t = _attempt(rec, job, t + job.recovery_gap, restart, job.steps, crash=False)
    return {"start": start, "end": t, "restart_step": restart}


@dataclass(frozen=True)
class FailingJob:
    """A long job with failures at a known rate, for checkpoint-interval studies.

    Failures arrive at exponential intervals of mean ``mtbf`` (wall-clock,
    saves included; none during a restart). A failure loses the work since
    the last completed save; the restart costs ``recovery`` (crash to job
    start) plus a ``restore`` span, then training resumes from the saved step.
    """

    mtbf: float = 3600.0
    save: float = 30.0
    recovery: float = 90.0
    restore: float = 30.0
    step: float = 10.0
    save_every: int = 45           # steps between saves
    duration: float = 40 * 3600.0  # wall-clock length of the job


def record_failing_job(rec: Recorder, start: float, job: FailingJob, seed: int
                       ) -> Dict[str, float]:
    """Plays ``job`` on ``rec`` from ``start``; returns its true figures:
    ``failures``, ``useful`` (seconds of kept steps) and ``end``."""
    import random

    rnd = random.Random(seed)
    t, end = start, start + job.duration
    saved = 0          # the step training resumes from
    useful = 0.0
    failures = 0
    rec.record_job_start_time(t)
    fail_at = t + rnd.expovariate(1.0 / job.mtbf)
    while t < end:
        step = saved
        crashed = False
        while t < end:
            if t + job.step > fail_at:
                crashed = True
                break
            rec.record_step_start_time(step, t)
            t += job.step
            step += 1
            if (step - saved) % job.save_every == 0 and step > saved:
                if t + job.save > fail_at:
                    crashed = True
                    break
                rec.record_checkpoint_save_start_time(step, t)
                t += job.save
                rec.record_checkpoint_save_end_time(step, t)
                useful += (step - saved) * job.step
                saved = step
        if not crashed:
            rec.record_step_end_time(step - 1, t)
            rec.record_job_end_time(t)
            useful += (step - saved) * job.step
            break
        failures += 1
        t = fail_at
        rec.record_disruption("exception:SimulatedFailure", t)
        t += job.recovery
        rec.record_job_start_time(t)
        rec.record_checkpoint_restore_start_time(saved, t)
        t += job.restore
        rec.record_checkpoint_restore_end_time(saved, t)
        fail_at = t + rnd.expovariate(1.0 / job.mtbf)
    return {"failures": failures, "useful": useful, "end": t}
