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
    restart = (job.crash_at_step // job.checkpoint_every) * job.checkpoint_every
    t = _attempt(rec, job, t + job.recovery_gap, restart, job.steps, crash=False)
    return {"start": start, "end": t, "restart_step": restart}
