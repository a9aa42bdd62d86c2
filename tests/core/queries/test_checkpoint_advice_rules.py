"""Every documented input and closed form of the checkpoint advice pinned
(docs/insights.md, "Checkpoint-interval advice"), on runs written event by
event so that each figure is derived by hand. Each test names the mutation
it was checked against (the rule broken by hand, the test failing)."""

from __future__ import annotations

import math

import pytest

from goodput_core.events import Kind
from goodput_core.queries.checkpoint_advice import advise
from tests.support.advice_runs import AdviceRun, two_attempts

def test_inputs_of_a_run_with_a_cut_save_a_restart_and_unequal_save_gaps():
    """Hand-derived from :func:`tests.support.advice_runs.two_attempts`:

    * one failure; total = the lifetime [0, 984) (no job end in attempt 1, so
      no idle) = 984 s, so M = 984 s, "rough" (fewer than 3 failures);
    * C: 5 completed saves of 12 s = 60 s / 5 = 12 s. The cut save is neither a
      save nor a save second (the old rule: 60 s / 6 started saves = 10 s);
    * R = recovery, disruption to restart [590, 700) = 110 s, plus attempt 2's
      init 10 + preparation 10 + restore 20 + compile 10 = 50 s up to its second
      step: 160 s (every one of the four counts);
    * save gaps inside an attempt: 212-100 = 112, 524-212 = 312, 962-850 = 112:
      median 112 s (mean 178.7; with the gap across the restart, 850-524 = 326,
      the median would be 219). The work between saves = 112 - C = 100 s = 10
      steps of the ideal 10 s (steps holding a save are 22 s: outliers);
    * Young sqrt(2 x 12 x 984) = sqrt(23616) = 153.675 s; Daly 153.675 - 12.

    Mutations killed: cut saves counted as saves (C = 10); any of restore,
    init, prep or startup dropped from R (R = 140-150); gaps across attempts
    (219); mean gap (178.7); steps from the gap with the save (11.2)."""
    calc = two_attempts().calc()
    r = calc.cumulative(now=984)
    assert r.disruptions == 1 and r.total_seconds == pytest.approx(984.0)
    a = calc.checkpoint_advice(now=984)
    assert a.available and a.disruptions == 1 and a.reason.startswith("rough")
    assert a.saves == 5
    assert a.mtbf_seconds == pytest.approx(984.0)
    assert a.save_seconds == pytest.approx(12.0)
    assert a.restart_seconds == pytest.approx(160.0)
    assert a.step_seconds == pytest.approx(10.0)
    assert a.current_interval_seconds == pytest.approx(100.0)
    assert a.current_interval_steps == pytest.approx(10.0)
    assert a.young_interval_seconds == pytest.approx(math.sqrt(23616.0))
    assert a.daly_interval_seconds == pytest.approx(math.sqrt(23616.0) - 12.0)
    assert a.recommended_interval_steps == pytest.approx(a.recommended_interval_seconds / 10.0)


def _failing(n_failures):
    """``n_failures`` crashed attempts, then a clean one: each attempt is job
    start, steps 0-2 (10 s), a save, steps 3-4 (the clean one ends there)."""
    r = AdviceRun()
    for i in range(n_failures + 1):
        r.ev(Kind.JOB_START)
        r.steps(0, 2), r.save(2), r.steps(3, 4)
        if i < n_failures:
            r.ev(Kind.DISRUPTION, extra={"disruption_cause": "sigkill"})
            r.t += 30.0
        else:
            r.ev(Kind.JOB_END)
    return r.calc()


@pytest.mark.parametrize("failures,rough", [(1, True), (2, True), (3, False), (4, False)])
def test_the_estimate_is_called_rough_below_three_failures(failures, rough):
    """Mutation killed: the threshold moved (< 2 or < 4 failures)."""
    a = _failing(failures).checkpoint_advice()
    assert a.available and a.disruptions == failures
    assert a.reason.startswith("rough") is rough
    assert (a.reason == "") is (not rough)


def test_young_and_daly_closed_forms():
    """M = 3600 s, C = 30 s: Young sqrt(2 x 30 x 3600) = sqrt(216000) = 464.758 s,
    Daly 464.758 - 30 = 434.758 s; with C >= M/2 (C = 2000 s) Daly's
    refinement does not apply and the interval is M. Mutations killed: Daly
    without "- C", Young without the factor 2."""
    a = advise(3600.0, 30.0, 120.0)
    assert a.young_interval_seconds == pytest.approx(464.758, abs=1e-3)
    assert a.daly_interval_seconds == pytest.approx(434.758, abs=1e-3)
    # the numeric optimum of the complete model lies near both (the curve is flat)
    assert 430.0 < a.recommended_interval_seconds < 500.0
    big = advise(3600.0, 2000.0, 0.0)
    assert big.young_interval_seconds == pytest.approx(math.sqrt(2 * 2000.0 * 3600.0))
    assert big.daly_interval_seconds == pytest.approx(3600.0)
