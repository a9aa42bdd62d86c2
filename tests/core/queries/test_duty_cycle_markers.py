"""The "duty cycle dropped" marker (queries/markers.py): derived by hand from
duty-cycle samples as ``log_system_metrics`` records them, and drawn by the
timeline picture."""

from __future__ import annotations

import uuid

import pytest

from goodput_core.queries.calculator import Calculator
from goodput_core.queries.markers import duty_cycle_drops, run_markers
from goodput_core.record.recorder import Recorder
from goodput_core.stores.memory import MemoryStore

T0 = 1_700_000_000.0


def _run(samples, name="tpu_duty_cycle", extra=()):
    """A 200 s job with one step every 10 s and duty-cycle samples every 10 s."""
    store = MemoryStore(f"duty-{uuid.uuid4().hex}")
    run = "duty"
    rec = Recorder(run, store, clock=lambda: T0)
    rec.record_job_start_time(T0)
    for k in range(20):
        rec.record_step_start_time(k, T0 + 10 * k)
    for i, v in enumerate(samples):
        rec.record_metric(name, v, time=T0 + 5 + 10 * i)
    for metric, v, t in extra:
        rec.record_metric(metric, v, time=t)
    rec.record_job_end_time(T0 + 200)
    rec.close()
    calc = Calculator(run, store, clock=lambda: T0 + 300)
    calc.refresh()
    return calc


def test_a_drop_below_the_recent_median_is_marked_once_until_it_recovers():
    #          baseline 90 (median of the 3..6 before)  drop   still down   back   drop again
    samples = [88, 90, 92, 91, 89, 90, 20, 25, 70, 90, 91, 89, 55, 90]
    calc = _run(samples)
    drops = duty_cycle_drops(calc)
    # sample 6 (20 %) falls 70 points below 90; 25 % and 70 % are still below 90 - 15;
    # 90 recovers; sample 12 (55 %) falls 35 points below the median of the six before
    # it (90 91 89 ... the drop's samples never joined the baseline)
    assert [(m.t, m.kind) for m in drops] == [(T0 + 65, "duty_cycle_drop"),
                                              (T0 + 125, "duty_cycle_drop")]
    assert drops[0].text == "TPU duty cycle dropped: 90 % -> 20 %"
    assert drops[1].text == "TPU duty cycle dropped: 90 % -> 55 %"
    # in the run's markers, in time order with the attempt start and the job end
    kinds = [m.kind for m in run_markers(calc)]
    assert kinds == ["attempt", "duty_cycle_drop", "duty_cycle_drop", "end"]


def test_no_marker_without_a_baseline_for_small_dips_or_for_other_hosts():
    assert duty_cycle_drops(_run([10, 95, 96])) == []          # fewer than 3 before it
    assert duty_cycle_drops(_run([90, 90, 90, 61, 90])) == []  # 29 points: not a drop
    calc = _run([90] * 5, name="gpu_duty_cycle",
                extra=[("gpu_duty_cycle{process_index=1}", v, T0 + 7 + 10 * i)
                       for i, v in enumerate([90, 90, 90, 5])])
    assert duty_cycle_drops(calc) == []                          # process 1's series
    assert [m.text for m in duty_cycle_drops(_run([90, 90, 90, 10], name="gpu_duty_cycle"))
            ] == ["GPU duty cycle dropped: 90 % -> 10 %"]


def test_the_timeline_picture_draws_the_marker(tmp_path):
    from goodput_core.cli.plot_timeline import MARKER_STYLE, collect

    calc = _run([90, 90, 90, 10, 90])
    data = collect(calc, now=T0 + 300)
    (drop,) = [m for m in data.markers if m.kind == "duty_cycle_drop"]
    assert drop.t == T0 + 35 and "duty_cycle_drop" in MARKER_STYLE
