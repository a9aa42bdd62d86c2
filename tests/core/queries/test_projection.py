"""What-if projection: the model against a Monte-Carlo simulation of the same
parameters over a grid of scales and intervals, and the inputs measured from a
run (hand-derived)."""

import uuid

import pytest

from goodput_core.queries.calculator import Calculator
from goodput_core.queries.projection import (
    expected_ettr, first_order_ettr, project, simulate)
from goodput_core.record.recorder import Recorder
from goodput_core.stores.memory import MemoryStore


@pytest.mark.parametrize("hosts", [1, 8, 64, 512])
@pytest.mark.parametrize("interval", [120.0, 600.0, 1800.0, 3600.0])
def test_the_projection_is_within_2_points_of_the_simulation(hosts, interval):
    # 0.005 failures per host-hour, 10 min restart overhead, 30 s saves
    rate, u0, save = 0.005, 600.0, 30.0
    model = expected_ettr(hosts, rate, u0, save, interval)
    sims = [simulate(hosts, rate, u0, save, interval, work_s=4e6, seed=s) for s in range(3)]
    sim = sum(sims) / len(sims)
    assert abs(model - sim) <= 0.02, (model, sim)


def test_the_first_order_form_agrees_when_failures_are_rare():
    # λ = 1e-6/s: (1 - λ(u0 + Δt/2)) / (1 + C/Δt) against the renewal model
    a = expected_ettr(1, 0.0036, 100, 10, 1000)
    b = first_order_ettr(1, 0.0036, 100, 10, 1000)
    assert a == pytest.approx(b, abs=1e-3)
    # no failures at all: only the saves cost, Δt / (Δt + C)
    assert expected_ettr(4, 0.0, 100, 10, 990) == pytest.approx(0.99)


def _run(rec, failures, hosts=1):
    """One host (``num_processes``: ``hosts``); attempts of 10 steps (1 s each) with a
    save (0.5 s) after steps 4 and 9 (saves every 5 steps: 5.5 s apart), each of the
    first `failures` attempts crashes at its 10th step start + 0.2 (a recorded
    preemption), the next job start 3.8 s later, its first step 1 s after that."""
    t = 0.0
    step = 0
    rec.record_metadata(num_processes=hosts)
    for a in range(failures + 1):
        rec.record_job_start_time(t)
        t += 1.0
        for k in range(10):
            rec.record_step_start_time(step, t)
            t += 1.0
            if k in (4, 9) and (k != 9 or a == failures):
                rec.record_checkpoint_save_start_time(step, t)
                t += 0.5
                rec.record_checkpoint_save_end_time(step, t)
            if k == 9 and a < failures:
                t -= 0.8  # the crash, 0.2 s into the last step
                rec.record_disruption("preemption", t)
                t += 3.8
                step -= 4  # resume from the checkpoint after step 4
            step += 1
        if a == failures:
            rec.record_step_end_time(step - 1, t)
            rec.record_job_end_time(t)
    return t


def test_inputs_are_measured_from_the_run():
    store = MemoryStore(uuid.uuid4().hex)
    rec = Recorder("r", store, strict=True, clock=lambda: 0.0)
    end = _run(rec, 3)
    assert rec.flush(30)
    calc = Calculator("r", store)
    calc.refresh()
    p = project(calc, end + 10, hosts=16, interval_s=60)
    assert p.available and not p.rough and p.failures == 3
    runtime = calc.cumulative(end + 10).total_seconds
    # r = 3 failures / (1 host x runtime hours)
    assert p.rate_per_host_hour == pytest.approx(3 / (runtime / 3600))
    # u0: the failure (0.2 s into a step, detected at once by the recorded
    # preemption) to the next first step: 3.8 s to the job start + 1 s = 4.8 s,
    # plus detection 0.2 s after the last step start: 5 s
    assert p.restart_seconds == pytest.approx(5.0)
    assert p.save_seconds == pytest.approx(0.5)
    # the checkpoint advice's interval: the work between saves (5.5 s from one
    # save's start to the next, less the 0.5 s save)
    assert p.current_interval_seconds == pytest.approx(5.0)
    assert p.ettr_now == pytest.approx(expected_ettr(1, p.rate_per_host_hour, 5, 0.5, 5.0))
    assert p.ettr_projected == pytest.approx(
        expected_ettr(16, p.rate_per_host_hour, 5, 0.5, 60))


def test_the_failure_rate_per_host_hour_divides_by_the_runs_host_count():
    """The same run on 4 hosts (``num_processes=4``): each host failed a quarter as
    often: r = 3 failures / (4 hosts x runtime hours); the model now is at 4 hosts."""
    store = MemoryStore(uuid.uuid4().hex)
    rec = Recorder("r", store, strict=True, clock=lambda: 0.0)
    end = _run(rec, 3, hosts=4)
    assert rec.flush(30)
    calc = Calculator("r", store)
    p = project(calc, end + 10)
    hours = calc.cumulative(end + 10).total_seconds / 3600
    assert p.current_hosts == 4 and p.rate_per_host_hour == pytest.approx(3 / (4 * hours))
    assert p.ettr_now == pytest.approx(expected_ettr(4, p.rate_per_host_hour, 5, 0.5, 5.0))
    # hence at 4 hosts the model gives what the 1-host run's rate gives at 4 x 1 host
    assert p.hosts_projected == 4 and p.ettr_projected == pytest.approx(p.ettr_now)
    assert p.measured_goodput == pytest.approx(calc.cumulative(end + 10).goodput / 100)


def test_fewer_than_3_failures_is_rough_and_none_is_no_projection():
    for failures, rough in ((1, True), (2, True)):
        store = MemoryStore(uuid.uuid4().hex)
        rec = Recorder("r", store, strict=True, clock=lambda: 0.0)
        end = _run(rec, failures)
        assert rec.flush(30)
        calc = Calculator("r", store)
        calc.refresh()
        p = project(calc, end)
        assert p.available and p.rough is rough and "rough" in p.reason
    store = MemoryStore(uuid.uuid4().hex)
    rec = Recorder("r", store, strict=True, clock=lambda: 0.0)
    end = _run(rec, 0)
    assert rec.flush(30)
    calc = Calculator("r", store)
    calc.refresh()
    p = project(calc, end)
    assert not p.available and "no failures" in p.reason
    with pytest.raises(ValueError):
        project(calc, end, hosts=0)
