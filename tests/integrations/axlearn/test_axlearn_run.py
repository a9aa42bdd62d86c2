"""AXLearn-style runs driven only by flag lists; numbers vs the simulation."""

from __future__ import annotations

import os

import pytest

from goodput_core import open_store
from goodput_core.buckets import BadputType
from goodput_core.calculator import Calculator
from goodput_core.events import to_payload
from goodput_integrations import axlearn as gax
from goodput_integrations.axlearn import recorder as recorder_module
from tests.support.tfevents import read_scalars

B = BadputType
Event, EventType = gax.Event, gax.EventType


class Crash(RuntimeError):
    pass


@pytest.fixture(autouse=True)
def hooks(monkeypatch, clock):
    """AXLearn calls from_flags(fv=...) only: the clock and the process index
    come from the class's test hooks."""
    monkeypatch.setattr(gax.GoodputSuiteRecorder, "_hook_clock", clock)
    monkeypatch.setattr(gax.GoodputSuiteRecorder, "_hook_process_index", 0)


def attempt(argv, clock, *, first_step, last_step, crash_at=None):
    """One process of an AXLearn job, as launch_trainer drives the recorder.

    Durations: accelerator init 5 s, preparation 15 s; per step 1 s of
    (legacy-API) data loading then 3 s of compute; a 2 s EVAL after step 3's
    compute; ``crash_at`` raises 1 s into that step. END_JOB is sent from a
    ``finally``, whatever happened.
    """
    rec = gax.initialize(argv)
    rec.start_monitoring()
    try:
        with rec.maybe_monitor_all():
            try:
                rec.record(Event.START_JOB)
                with rec.record_event(EventType.ACCELERATOR_INIT):
                    clock.advance(5)
                with rec.record_event(EventType.TRAINING_PREPARATION):
                    clock.advance(15)
                for step in range(first_step, last_step):
                    rec.record(Event.START_DATA_LOADING)
                    clock.advance(1)
                    rec.record(Event.END_DATA_LOADING)
                    rec.record(Event.START_STEP, step)
                    if step == crash_at:
                        clock.advance(1)
                        raise Crash(f"step {step}")
                    clock.advance(3)
                    if step == 3:
                        rec.record(Event.START_CUSTOM_BADPUT_EVENT,
                                   custom_badput_event_type="EVAL")
                        clock.advance(2)
                        rec.record(Event.END_CUSTOM_BADPUT_EVENT,
                                   custom_badput_event_type="EVAL")
            finally:
                rec.record(Event.END_JOB)
    finally:
        assert rec.flush(10)  # the exit hook of the process
    return rec


def report(run_name, store_url, clock):
    calc = Calculator(run_name, store_url, clock=clock)
    calc.refresh()
    return calc.cumulative()


def test_crash_end_job_in_finally_then_restart(flags, clock, run_name, store_url, tmp_path):
    argv = flags(rolling_window_size="3600", include_step_deviation="true")
    with pytest.raises(Crash):
        attempt(argv, clock, first_step=0, last_step=8, crash_at=6)  # crash at 48 s
    clock.advance(30)  # restarted 30 s later, from the checkpoint of step 4
    attempt(argv, clock, first_step=4, last_step=10)
    r = report(run_name, store_url, clock)

    # attempt 1: 0-5 init, 5-20 prep, 20-21 load, steps 0-5 at 21+4k (step 3: 6 s),
    # step 6 at 47, crash at 48; recovery to 78; attempt 2: 78-83 init, 83-98 prep,
    # 98-99 load, steps 4-9 at 99+4k, job end at 122 (the END_JOB after the loop)
    assert r.total_seconds == pytest.approx(122.0, abs=1e-9)
    assert r.disruptions == 1
    assert r.badput_seconds[B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] == pytest.approx(
        30.0, abs=1e-9)
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == pytest.approx(9.0, abs=1e-9)
    assert r.badput_seconds[B.TPU_INITIALIZATION] == pytest.approx(10.0, abs=1e-9)
    assert r.badput_seconds[B.TRAINING_PREP] == pytest.approx(30.0, abs=1e-9)
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(2.0, abs=1e-9)
    assert r.custom_badput_seconds == {"EVAL": pytest.approx(2.0, abs=1e-9)}
    assert r.productive_seconds == pytest.approx(16.0 + 23.0, abs=1e-9)
    assert r.idle_seconds == 0.0  # the crash's END_JOB did not become a clean end
    assert r.max_productive_step == 9

    payloads = [to_payload(e) for e in open_store(store_url).read(run_name)[0]]
    assert [p["disruption_cause"] for p in payloads if "disruption_cause" in p] == [
        "exception:Crash"]
    assert sum("job_end_time" in p for p in payloads) == 1

    summaries = tmp_path / "summaries"
    scalars = read_scalars(str(summaries / "goodput"))
    assert scalars["goodput/goodput"][-1][1] == pytest.approx(100 * 39 / 122, rel=1e-6)
    assert "step_deviation" in scalars
    rolling = read_scalars(str(summaries / f"rolling_window_{run_name}" / "goodput"))
    assert rolling["goodput/rolling_3600s"][-1][1] == pytest.approx(100 * 39 / 122, rel=1e-6)


def test_end_job_on_crash_keeps_axlearns_behaviour(flags, clock, run_name, store_url):
    argv = flags(end_job_on_crash="true", enable_monitoring="false")
    with pytest.raises(Crash):
        attempt(argv, clock, first_step=0, last_step=3, crash_at=1)
    payloads = [to_payload(e) for e in open_store(store_url).read(run_name)[0]]
    assert any("job_end_time" in p for p in payloads)
    assert not any("disruption_cause" in p for p in payloads)


def _inside_unrelated_except(run):
    """Runs ``run()`` while an unrelated FileNotFoundError is being handled."""
    try:
        raise FileNotFoundError("config.yaml")
    except FileNotFoundError:
        return run()


def _ends_and_causes(run_name, store_url):
    payloads = [to_payload(e) for e in open_store(store_url).read(run_name)[0]]
    return (sum("job_end_time" in p for p in payloads),
            [p["disruption_cause"] for p in payloads if "disruption_cause" in p])


def test_success_inside_an_unrelated_except_block_is_a_clean_end(flags, clock, run_name,
                                                                 store_url):
    # sys.exc_info() at END_JOB is the outer FileNotFoundError: not a crash
    argv = flags(enable_monitoring="false")
    _inside_unrelated_except(lambda: attempt(argv, clock, first_step=0, last_step=5))
    assert _ends_and_causes(run_name, store_url) == (1, [])
    r = report(run_name, store_url, clock)
    assert r.disruptions == 0
    # 0-5 init, 5-20 prep, 20-21 load, steps 0-4 start at 21, 25, 29, 33, 39 (step 3
    # holds the 2 s EVAL), END_JOB at 42: steps span 21 s, less the EVAL
    assert r.total_seconds == pytest.approx(42.0, abs=1e-9)
    assert r.productive_seconds == pytest.approx(19.0, abs=1e-9)


def test_crash_inside_an_unrelated_except_block_is_a_disruption(flags, clock, run_name,
                                                                store_url):
    argv = flags(enable_monitoring="false")
    with pytest.raises(Crash):
        _inside_unrelated_except(
            lambda: attempt(argv, clock, first_step=0, last_step=5, crash_at=2))
    assert _ends_and_causes(run_name, store_url) == (0, ["exception:Crash"])


def test_every_legacy_event_and_event_type(flags, clock, run_name, store_url):
    rec = gax.GoodputSuiteRecorder.from_flags(flags(enable_monitoring="false"))
    for event in Event:
        args = (7,) if event.name == "START_STEP" else ()
        kwargs = ({"custom_badput_event_type": "SDC"} if "CUSTOM" in event.name else {})
        rec.record(event, *args, **kwargs)
        clock.advance(1)
    with rec.record_event(EventType.JOB):
        for event_type in EventType:
            if event_type.name == "JOB":
                continue
            args = (8,) if event_type.name == "STEP" else ()
            kwargs = ({"custom_badput_event_type": "EVAL"}
                      if event_type.name == "CUSTOM_BADPUT_EVENT" else {})
            with rec.record_event(event_type, *args, **kwargs):
                clock.advance(1)
    assert rec.flush(10)
    keys = [next(k for k in p if k.endswith("_time"))
            for p in map(to_payload, open_store(store_url).read(run_name)[0])]
    legacy = ["job_start_time", "job_end_time", "step_start_time", "tpu_init_start_time",
              "tpu_init_end_time", "training_prep_start_time", "training_prep_end_time",
              "data_loading_start_time", "data_loading_end_time",
              "custom_badput_event_start_time", "custom_badput_event_end_time"]
    phases = ["job_start_time", "step_start_time", "step_end_time", "tpu_init_start_time",
              "tpu_init_end_time", "training_prep_start_time", "training_prep_end_time",
              "data_loading_start_time", "data_loading_end_time",
              "custom_badput_event_start_time", "custom_badput_event_end_time",
              "job_end_time"]
    assert sorted(keys) == sorted(legacy + phases)
    assert len(Event) == 11


def test_record_never_raises(flags, clock, caplog):
    rec = gax.GoodputSuiteRecorder.from_flags(flags(enable_monitoring="false"))
    rec.record("NOT_AN_EVENT")
    rec.record(Event.START_STEP)  # no step: dropped, logged
    rec.record(Event.START_STEP, "seven")
    rec.record(Event.START_JOB, bogus_kwarg=1)
    with rec.record_event("NOT_A_TYPE"):
        pass
    assert rec.flush(10)


def test_from_flags_makes_no_jax_call_and_events_wait_for_the_index(
        flags, clock, run_name, store_url, monkeypatch):
    asked = []
    answer = [None]  # unknown until "jax.distributed" is up

    def index():
        asked.append(1)
        return answer[0]

    monkeypatch.setattr(gax.GoodputSuiteRecorder, "_hook_process_index", index)
    monkeypatch.setattr(recorder_module, "_probe_index",
                        lambda: pytest.fail("from_flags must not probe JAX"))
    rec = gax.initialize(flags(enable_monitoring="false"))
    assert asked == []
    rec.record(Event.START_JOB)  # buffered, stamped now
    start = clock.t
    clock.advance(10)
    answer[0] = 0
    rec.record(Event.START_STEP, 0)
    assert rec.flush(10)
    events = open_store(store_url).read(run_name)[0]
    assert [to_payload(e).get("job_start_time") for e in events][0] == start


def test_only_process_zero_writes_and_monitors(flags, clock, run_name, store_url, tmp_path,
                                               monkeypatch):
    monkeypatch.setattr(gax.GoodputSuiteRecorder, "_hook_process_index", 1)
    rec = gax.initialize(flags())
    with rec.maybe_monitor_all():
        rec.record(Event.START_JOB)
        rec.record(Event.END_JOB)
    assert rec.flush(10)
    assert open_store(store_url).read(run_name)[0] == []
    assert not os.path.exists(tmp_path / "summaries")


def test_per_host_lets_every_process_write_but_only_zero_monitors(
        flags, clock, run_name, store_url, tmp_path, monkeypatch):
    monkeypatch.setattr(gax.GoodputSuiteRecorder, "_hook_process_index", 3)
    rec = gax.initialize(flags(per_host="true"))
    with rec.maybe_monitor_all():
        rec.record(Event.START_JOB)
    assert rec.flush(10)
    (event,) = open_store(store_url).read(run_name)[0]
    assert event.process_index == 3
    assert not os.path.exists(tmp_path / "summaries")


def test_eager_monitoring_starts_in_start_monitoring(flags, clock, run_name, tmp_path):
    rec = gax.initialize(flags(eager_monitoring="true"))
    rec.start_monitoring()
    rec.record(Event.START_JOB)
    clock.advance(4)
    with rec.maybe_monitor_all():  # already monitoring: nothing more is started
        pass
    assert rec._monitors.running
    rec.record(Event.END_JOB)
    assert rec.close(10)
    assert read_scalars(str(tmp_path / "summaries" / "goodput"))["goodput/goodput"]


def test_lazy_monitoring_does_nothing_in_start_monitoring(flags, tmp_path):
    rec = gax.initialize(flags())
    rec.start_monitoring()
    assert not rec._monitors.running and not os.path.exists(tmp_path / "summaries")
