"""The ground-truth acceptance test (semantics.md): jobs played by the simulator
of :mod:`tests.support.ground_truth_sim` with known phase durations; every
bucket the calculator reports must equal the true duration to 1e-9 s."""

from __future__ import annotations

import os
from typing import List

import pytest
from hypothesis import HealthCheck, given, settings

from goodput_core.queries.calculator import Calculator
from goodput_core.timeline.buckets import BadputType as B
from tests.support.ground_truth_sim import PROD, AttemptPlan, Simulator, jobs


def check(plans: List[AttemptPlan], seed: int, writers: int = 1) -> None:
    sim = Simulator(seed, writers)
    sim.play(plans)
    max_kept = sim.settle()
    sim.rec.flush()
    sim.rec.close()
    now = sim.clock.t
    if plans[-1].ending != "open" or plans[-1].stop:
        # the lifetime ends at the last job end, or where the run stopped
        # (rule 15: 1000 s is far beyond 3 heartbeat intervals), not at now
        now += 1000.0
    results = []
    sim.calc.refresh()
    results.append(sim.calc.cumulative(now=now))
    cold = Calculator(sim.run, sim.store, clock=lambda: now)
    cold.refresh()
    results.append(cold.cumulative())
    expected_total = sum(sim.truth.values())
    for r in results:
        assert r.skipped == ({"unmatched_start": sim.unmatched} if sim.unmatched else {})
        got = {b.name: v for b, v in r.badput_seconds.items() if b is not B.DATA_LOADING_ASYNC}
        got[PROD] = r.productive_seconds
        want = {name: sim.truth.get(name, 0.0) for name in got}
        for name in got:
            assert got[name] == pytest.approx(want[name], abs=1e-9), (name, got, dict(sim.truth))
        assert set(sim.truth) <= set(got)
        assert r.total_seconds == pytest.approx(expected_total, abs=1e-9)
        assert r.idle_seconds == pytest.approx(sim.idle, abs=1e-9)
        assert r.data_loading_async_seconds == pytest.approx(sim.async_load, abs=1e-9)
        custom = {k: v for k, v in r.custom_badput_seconds.items() if v}
        assert custom == pytest.approx({k: v for k, v in sim.custom.items() if v}, abs=1e-9)
        assert r.disruptions == sim.disruptions
        assert r.max_productive_step == max_kept


# GOODPUT_HYPOTHESIS_EXAMPLES raises the example count for stress runs
@settings(max_examples=int(os.environ.get("GOODPUT_HYPOTHESIS_EXAMPLES", 80)), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs())
def test_every_bucket_equals_the_true_duration(job):
    plans, seed, writers = job
    check(plans, seed, writers)


@pytest.mark.parametrize("writers, load_api, straggle, first_straggle", [
    (1, "reference", 0, 0), (1, "blocking", 0, 0), (1, "overlapped", 0, 16),
    (3, "reference", 0, 0), (3, "blocking", 0, 0), (3, "overlapped", 24, 0),
    (3, "blocking", 48, 0), (3, "reference", 48, 64), (3, "overlapped", 0, 96)])
def test_a_fixed_job_with_crash_restart_and_planned_stop(writers, load_api, straggle,
                                                         first_straggle):
    base = dict(gap=8, tpu=320, prep_a=64, restore=0, prep_b=64, sync_load=32,
                compile_mode="heuristic", compile=256, step=64, load=16, eval_every=5, eval=128,
                save_every=4, save=32, n_steps=10, ending="crash", partial=20,
                disruption=True, gap_after=1280, resume_from_ckpt=False, orbax=True,
                orbax_no_start=False, step_ends=False, load_api=load_api, straggle=straggle,
                first_straggle=first_straggle)
    plans = [AttemptPlan(**base),
             AttemptPlan(**{**base, "restore": 96, "compile_mode": "explicit", "ending": "end",
                            "orbax": False, "step_ends": True, "resume_from_ckpt": True}),
             AttemptPlan(**{**base, "ending": "end", "disruption": False})]
    check(plans, 7, writers)


@pytest.mark.parametrize("phase", ["init", "prep", "compile"])
@pytest.mark.parametrize("disruption", [True, False])
def test_a_crash_before_the_first_step(phase, disruption):
    """Attempt 1 runs steps and stops; attempt 2 is preempted in ``phase``
    (its phase end unrecorded); attempt 3 crashes in ``phase`` with the end
    recorded; attempt 4 resumes from the last checkpoint and ends."""
    base = dict(gap=8, tpu=320, prep_a=64, restore=32, prep_b=64, sync_load=32,
                compile_mode="explicit", compile=256, step=64, load=16, eval_every=0, eval=1,
                save_every=2, save=32, n_steps=5, ending="end", partial=0,
                disruption=disruption, gap_after=1280, resume_from_ckpt=True, orbax=True,
                orbax_no_start=False, step_ends=True)
    plans = [AttemptPlan(**base),
             AttemptPlan(**base, early_crash=phase, early_at=40, early_end=False),
             AttemptPlan(**base, early_crash=phase, early_at=20, early_end=True),
             AttemptPlan(**base)]
    check(plans, 3)
