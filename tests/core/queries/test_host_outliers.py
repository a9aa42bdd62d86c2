"""Host outliers: per-host host-local time and the hosts that slow everyone down."""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest

from goodput_core import Calculator, Recorder
from goodput_core.events import EventRecord, Kind
from goodput_core.queries.host_outliers import HostTracker, breakdown_of


def _ev(pi, kind, t, step=None):
    return EventRecord("h", int(kind), float(t), step, None, pi)


def _host(pi, load):
    """A host: job start 0, loads of ``load`` s before each of 10 steps 1 s apart."""
    ev = [_ev(pi, Kind.JOB_START, 0)]
    for k in range(10):
        ev += [_ev(pi, Kind.DATA_LOADING_START, k + 1 - load), _ev(pi, Kind.DATA_LOADING_END, k + 1),
               _ev(pi, Kind.STEP_START, k + 1, k)]
    ev += [_ev(pi, Kind.STEP_END, 11, 9), _ev(pi, Kind.JOB_END, 11)]
    return ev


def test_hand_derived_breakdown_names_the_slow_host_only():
    tracker = HostTracker("h", new_calculator=lambda: Calculator("h"))
    for pi, load in enumerate((0.05, 0.05, 0.5, 0.06)):
        tracker.add(_host(pi, load))
    b = tracker.breakdown(now=20)
    by = {h.process_index: h for h in b.hosts}
    # host 2: the first load (before step 0) blocks, 9 more overlap steps: 10 x 0.5 s
    assert by[2].seconds["DATA_LOADING"] == pytest.approx(5.0)
    assert by[0].seconds["DATA_LOADING"] == pytest.approx(0.5)
    assert b.median["DATA_LOADING"] == pytest.approx((0.5 + 0.6) / 2)
    assert [(o[0], o[1]) for o in b.outliers] == [(2, "DATA_LOADING")]
    assert b.outliers[0][2] == pytest.approx(5.0 - 0.55)
    assert by[1].median_step_seconds == pytest.approx(1.0)


def test_no_outlier_below_one_percent_of_total():
    tracker = HostTracker("h", new_calculator=lambda: Calculator("h"))
    for pi, load in enumerate((0.001, 0.001, 0.005, 0.001)):  # 5x, but 0.04 s of 11 s
        tracker.add(_host(pi, load))
    assert tracker.breakdown(now=20).outliers == []
    # The edges of both conditions, the cause and the order, and the minimum of
    # three hosts: tests/core/queries/test_host_outlier_rules.py.


def _worker(store, index, slow, barrier, steps):
    rec = Recorder("lockstep", store, process_index=index, hang_detection=False)
    rec.record_job_start_time()
    for step in range(steps):
        with rec.data_loading():
            time.sleep(0.03 if index == slow else 0.002)   # the workload, not a timing check
        barrier.wait(timeout=60)                            # synchronous training
        rec.record_step_start_time(step)
        sum(range(2000))
    barrier.wait(timeout=60)
    rec.record_step_end_time(steps - 1)
    rec.record_job_end_time()
    rec.close()


def test_four_real_processes_in_lockstep_with_one_slow_loader(tmp_path):
    store = f"sqlite:///{tmp_path / 'hosts.sqlite'}"
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_worker, args=(store, i, 2, barrier, 40)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    calc = Calculator("lockstep", store)
    b = calc.hosts()
    assert sorted(h.process_index for h in b.hosts) == [0, 1, 2, 3]
    assert [(o[0], o[1]) for o in b.outliers] == [(2, "DATA_LOADING")]
    slow = {h.process_index: h for h in b.hosts}[2]
    assert slow.seconds["DATA_LOADING"] > 40 * 0.03 * 0.9


def test_breakdown_of_nothing():
    assert breakdown_of({}, 0.0).hosts == []
    with pytest.raises(ValueError):
        Calculator().hosts()
