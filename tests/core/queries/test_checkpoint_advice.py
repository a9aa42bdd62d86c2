"""Checkpoint-interval advice: the model, the inputs read from a run, and the
acceptance simulation (failures at a known rate, a sweep of intervals)."""

from __future__ import annotations

import math
import statistics

import pytest

from goodput_core import Calculator, Recorder
from goodput_core.queries.checkpoint_advice import best_interval, waste
from goodput_core.stores.memory import MemoryStore
from goodput_core.cli.synthetic import FailingJob, SyntheticJob, record_failing_job, \
    record_synthetic_job

SEEDS = (0, 1, 2)
STEP = 10.0


def _simulate(save_every: int, seed: int):
    store = MemoryStore()
    rec = Recorder("sim", store, hang_detection=False, queue_size=10 ** 7)
    truth = record_failing_job(rec, 1.0e9, FailingJob(save_every=save_every, step=STEP), seed)
    rec.flush()
    rec.close()
    calc = Calculator("sim", store)
    calc.refresh()
    return calc, truth


def test_the_model_without_failures_during_saves_is_youngs_optimum():
    # For C << M the optimum of the complete model approaches sqrt(2CM) - C (Daly).
    m, c = 1e6, 1.0
    assert best_interval(m, c, 0.0) == pytest.approx(math.sqrt(2 * c * m) - c, rel=0.01)
    # waste is the share lost: with no failures at all nothing is lost but the saves
    assert waste(100.0, 1e12, 10.0, 0.0) == pytest.approx(10.0 / 110.0, rel=1e-3)


def test_inputs_come_from_the_run():
    calc, truth = _simulate(45, 0)
    advice = calc.checkpoint_advice(now=truth["end"])
    r = calc.cumulative(now=truth["end"])
    assert advice.available and advice.disruptions == truth["failures"] == r.disruptions
    assert advice.mtbf_seconds == pytest.approx(r.total_seconds / truth["failures"])
    assert advice.save_seconds == pytest.approx(30.0)          # every save blocked 30 s
    assert advice.restart_seconds == pytest.approx(120.0, rel=0.02)  # 90 s gap + 30 s restore
    # the work between saves: 45 steps of 10 s (the 30 s save is not in it)
    assert advice.current_interval_seconds == pytest.approx(45 * STEP)
    assert advice.current_interval_steps == pytest.approx(45)
    assert advice.young_interval_seconds == pytest.approx(
        math.sqrt(2 * 30.0 * advice.mtbf_seconds))


def test_no_advice_without_failures_or_saves():
    store = MemoryStore()
    rec = Recorder("clean", store, hang_detection=False)
    rec.record_job_start_time(1000.0)
    for k in range(20):
        rec.record_step_start_time(k, 1001.0 + k)
        if k % 5 == 4:
            rec.record_checkpoint_save_start_time(k, 1001.5 + k)
            rec.record_checkpoint_save_end_time(k, 1001.7 + k)
    rec.record_job_end_time(1030.0)
    rec.flush()
    calc = Calculator("clean", store)
    calc.refresh()
    assert calc.cumulative().disruptions == 0
    advice = calc.checkpoint_advice()
    assert not advice.available and "no failures" in advice.reason
    store2 = MemoryStore()
    rec2 = Recorder("nosave", store2, hang_detection=False)
    record_synthetic_job(rec2, 1000.0, SyntheticJob(checkpoint_every=0))
    rec2.flush()
    calc2 = Calculator("nosave", store2)
    calc2.refresh()
    advice2 = calc2.checkpoint_advice()
    assert not advice2.available and "no checkpoint saves" in advice2.reason


def test_acceptance_the_recommended_interval_is_near_the_simulated_best():
    """docs/insights.md: at the recommended interval the simulated goodput is within
    0.5 points of the best of the sweep; between half and twice the optimum the
    predicted goodput is within 2 points of the simulated one (means over seeds)."""
    sweep = (10, 20, 30, 45, 60, 90, 120)  # steps between saves: 100 s to 1200 s of work
    simulated, predicted, recommended = {}, {}, []
    for every in sweep:
        runs = [_simulate(every, seed) for seed in SEEDS]
        simulated[every] = statistics.mean(c.cumulative(now=t["end"]).goodput for c, t in runs)
        advice = [c.checkpoint_advice(now=t["end"]) for c, t in runs]
        predicted[every] = statistics.mean(100 * (1 - a.waste_now) for a in advice)
        recommended += [a.recommended_interval_seconds for a in advice]
    best = max(simulated.values())
    tau = statistics.mean(recommended)
    at_rec = statistics.mean(_simulate(max(1, round(tau / STEP)), s)[0].cumulative().goodput
                             for s in SEEDS)
    assert best - at_rec <= 0.5, (tau, at_rec, simulated)
    near = [e for e in sweep if 0.5 * tau <= e * STEP <= 2 * tau]
    assert len(near) >= 3
    for every in near:
        assert abs(predicted[every] - simulated[every]) <= 2.0, (every, predicted, simulated)
