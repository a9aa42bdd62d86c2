"""An elastic run with metadata and metrics, and its hand-computed truth.

Times are seconds after ``T0``; every number below follows from the
definitions (semantics.md, goodput_core/queries/elastic.py, program_goodput.py)::

    0   job start; slice counts active 4 / total 4 / available 4
    0-8 steps 0..4 start every 2 s
    10  slice counts 2 / 4 / 3; slice-down wait 10-14, re-initialisation 14-16
    16  slice counts 4 / 4 / 4; steps 5..9 start at 16, 18, ..., 24
    26  step 9 ends; job end

Productive: the spans [0, 10) and [16, 26) = 20 s (the wait and the re-init
are carved out of step 4's span [8, 16), rule 8); total 26 s; slice-down 4 s,
re-init 2 s; max productive step 9; 10 productive steps.

Slice efficiency (time-weighted, ``active / total`` and ``available / total``):

* whole run [0, 26]: stepping (10·1 + 6·0.5 + 10·1) / 26 = 23/26,
  available (10 + 6·0.75 + 10) / 26 = 24.5/26;
* at query time 30, a rolling 20 s window ends where the run ended (26, rule 10),
  [6, 26]: stepping (4 + 6·0.5 + 10) / 20 = 17/20, available (4 + 6·0.75 + 10) / 20
  = 18.5/20; an explicit interval [10, 30] is clipped to [10, 26]: stepping
  (6·0.5 + 10) / 16 = 13/16, available (6·0.75 + 10) / 16 = 14.5/16.

Program goodput with ``flops_per_step=2e12``, ``peak_flops_per_device=1e12``,
``num_devices=2``: 10 steps / 20 s = 0.5 steps/s, MFU = 2e12·0.5 / (1e12·2)
= 0.5; ML productivity goodput = (20/26)·0.5 = 10/26.

Metrics: ``loss`` = 10 − k at step k, recorded 1 s after step k starts;
``lr`` without a step: 0.1 at 0.5 and 0.05 at 20.5.
"""

from __future__ import annotations

from typing import Any, Dict

T0 = 1_700_000_000.0
QUERY = T0 + 30.0
STEP_STARTS = [0, 2, 4, 6, 8, 16, 18, 20, 22, 24]

TRUTH: Dict[str, Any] = {
    "productive": 20.0, "total": 26.0, "slice_down": 4.0, "reinit": 2.0,
    "max_step": 9, "productive_steps": 10,
    "stepping": 23 / 26, "available": 24.5 / 26,
    "window": 20, "window_stepping": 17 / 20, "window_available": 18.5 / 20,
    "window_seconds": 20.0, "end": T0 + 26.0,
    "interval_stepping": 13 / 16, "interval_available": 14.5 / 16,
    "mfu": 0.5, "ml_productivity": 10 / 26, "steps_per_second": 0.5,
    "loss": [(k, T0 + STEP_STARTS[k] + 1, 10.0 - k) for k in range(10)],
    "lr": [(-1, T0 + 0.5, 0.1), (-1, T0 + 20.5, 0.05)],
}


def record_diagnostic_run(rec, *, metadata: bool = True, metrics: bool = True,
                          slices: bool = True) -> None:
    """Records the run of the module docstring through ``rec`` (a Recorder).

    Args:
      rec: the recorder (its clock stamps the metadata event: give it ``T0``).
      metadata, metrics, slices: record those parts.
    """
    rec.record_job_start_time(T0)
    if slices:
        rec.record_elastic_slice_counts(4, 4, 4, T0)
    if metadata:
        rec.record_metadata(flops_per_step=2e12, peak_flops_per_device=1e12, num_devices=2)
    for k, start in enumerate(STEP_STARTS):
        rec.record_step_start_time(k, T0 + start)
    if slices:
        rec.record_elastic_slice_counts(2, 4, 3, T0 + 10)
        rec.record_elastic_slice_counts(4, 4, 4, T0 + 16)
    rec.record_elastic_wait_start_time("slice_down", T0 + 10)
    rec.record_elastic_wait_end_time("slice_down", T0 + 14)
    rec.record_elastic_reinit_start_time(T0 + 14)
    rec.record_elastic_reinit_end_time(T0 + 16)
    rec.record_step_end_time(9, T0 + 26)
    rec.record_job_end_time(T0 + 26)
    if metrics:
        for step, t, value in TRUTH["loss"]:
            rec.record_metric("loss", value, step=step, time=t)
        for _, t, value in TRUTH["lr"]:
            rec.record_metric("lr", value, time=t)
