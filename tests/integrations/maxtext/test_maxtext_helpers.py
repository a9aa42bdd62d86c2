"""MaxText's helper API driven only by a config object; numbers vs the simulation."""

from __future__ import annotations

import os
import types

import pytest

from goodput_core import flush_all, open_store
from goodput_core.buckets import BadputType
from goodput_core.calculator import Calculator
from goodput_core.compat.goodput import GoodputRecorder
from goodput_core.compat.goodput_elastic import ElasticGoodputRecorder
from goodput_core.events import to_payload
from goodput_integrations import maxtext as mt
from goodput_integrations.maxtext import helpers
from tests.support.tfevents import read_scalars

B = BadputType


class Crash(RuntimeError):
    pass


def train(config, clock, *, start_step=0, steps=10, crash_at=None):
    """A MaxText-style job: the helper calls MaxText's train.py makes, in order.

    Durations: TPU init 10 s, preparation 20 s, first batch 2 s (blocking),
    then each step 4 s of compute followed by loading the next batch (1 s),
    2 s of wrap-up after the last step. ``crash_at``: the step that raises
    1 s into its compute.
    """
    recorder = mt.create_goodput_recorder(config)
    with mt.maybe_monitor_goodput(config):
        with mt.maybe_record_goodput(recorder, mt.GoodputEvent.JOB):
            with mt.maybe_record_goodput(recorder, mt.GoodputEvent.TPU_INIT):
                clock.advance(10)
            with mt.maybe_record_goodput(recorder, mt.GoodputEvent.TRAINING_PREPARATION):
                clock.advance(20)
            with mt.maybe_record_goodput(recorder, mt.GoodputEvent.DATA_LOADING):
                clock.advance(2)
            for step in range(start_step, steps):
                with mt.maybe_record_goodput(recorder, mt.GoodputEvent.STEP, step):
                    if step == crash_at:
                        clock.advance(1)
                        raise Crash(f"step {step}")
                    clock.advance(4)
                if step < steps - 1:
                    with mt.maybe_record_goodput(recorder, mt.GoodputEvent.DATA_LOADING):
                        clock.advance(1)
            clock.advance(2)
    return recorder


def report(config, clock):
    assert flush_all(10)  # what the exit hook of each "process" does
    calc = Calculator(config.run_name, config.goodput_store, clock=clock)
    calc.refresh()
    return calc.cumulative()


def test_clean_run_numbers_and_tensorboard(make_config, clock):
    config = make_config(goodput_rolling_windows="3600")
    train(config, clock)
    r = report(config, clock)
    # 10 + 20 + 2 + 9 steps x 5 s + the last step's 4 s + 2 s wrap-up
    assert r.total_seconds == pytest.approx(83.0, abs=1e-9)
    assert r.productive_seconds == pytest.approx(49.0, abs=1e-9)
    assert r.badput_seconds[B.TPU_INITIALIZATION] == pytest.approx(10.0, abs=1e-9)
    assert r.badput_seconds[B.TRAINING_PREP] == pytest.approx(20.0, abs=1e-9)
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(2.0, abs=1e-9)
    assert r.data_loading_async_seconds == pytest.approx(9.0, abs=1e-9)
    assert r.badput_seconds[B.OTHER] == pytest.approx(2.0, abs=1e-9)
    assert r.badput_seconds[B.PROGRAM_STARTUP] == 0
    assert (r.disruptions, r.max_productive_step) == (0, 9)

    # MaxText's conventional place: {base_output_directory}/{run_name}/tensorboard/goodput
    tb = os.path.join(config.base_output_directory, config.run_name, "tensorboard", "goodput")
    scalars = read_scalars(tb)
    step, value, _ = scalars["goodput/goodput"][-1]
    assert (step, value) == (9, pytest.approx(100 * 49 / 83, rel=1e-6))
    assert scalars["badput/tpu_initialization"][-1][1] == pytest.approx(100 * 10 / 83, rel=1e-6)
    assert "step_deviation" in scalars  # monitor_step_time_deviation (default true)
    assert scalars["goodput/rolling_3600s"][-1][1] == pytest.approx(100 * 49 / 83, rel=1e-6)


def test_crash_then_restart_numbers(make_config, clock):
    config = make_config(monitor_goodput=False)
    with pytest.raises(Crash):
        train(config, clock, crash_at=6)  # crashes at 32 + 6*5 + 1 = 63 s
    clock.advance(30)  # the scheduler restarts the job 30 s later
    train(config, clock, start_step=4)  # from the checkpoint of step 4
    r = report(config, clock)
    # attempt 1: 63 s; recovery 30 s; attempt 2: 32 + 5*5 + 4 + 2 = 63 s
    assert r.total_seconds == pytest.approx(156.0, abs=1e-9)
    assert r.disruptions == 1
    # steps 4, 5 (5 s each) and the first second of step 6 were redone
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == pytest.approx(11.0, abs=1e-9)
    # the crash is recorded by the JOB block: recovery runs from it to the restart
    assert r.badput_seconds[B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] == pytest.approx(
        30.0, abs=1e-9)
    assert r.badput_seconds[B.TPU_INITIALIZATION] == pytest.approx(20.0, abs=1e-9)
    assert r.badput_seconds[B.TRAINING_PREP] == pytest.approx(40.0, abs=1e-9)
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(4.0, abs=1e-9)
    assert r.productive_seconds == pytest.approx(20.0 + 29.0, abs=1e-9)
    assert r.max_productive_step == 9
    payloads = [to_payload(e) for e in open_store(config.goodput_store).read(config.run_name)[0]]
    causes = [p["disruption_cause"] for p in payloads if "disruption_cause" in p]
    assert causes == ["exception:Crash"]
    assert sum("job_end_time" in p for p in payloads) == 1  # only the graceful attempt


def test_recording_off_gives_none_and_monitoring_off_starts_nothing(make_config, tmp_path):
    config = make_config(enable_goodput_recording=False, monitor_goodput=False)
    assert mt.create_goodput_recorder(config) is None
    with mt.maybe_monitor_goodput(config) as monitor:
        assert monitor is None
    mt.record_goodput(None, mt.RECORD_JOB_START_TIME)  # None is fine, as in MaxText
    with mt.maybe_record_goodput(None, mt.GoodputEvent.STEP, 3):
        pass
    assert not os.path.exists(os.path.join(config.base_output_directory))


def test_only_process_zero_writes_and_monitors(make_config):
    config = make_config(_goodput_process_index=1)
    recorder = mt.create_goodput_recorder(config)
    assert isinstance(recorder, GoodputRecorder) and not recorder.logging_enabled
    with mt.maybe_monitor_goodput(config) as monitor:
        assert monitor is None
        mt.record_goodput(recorder, mt.RECORD_JOB_START_TIME)
    assert recorder.flush(5)
    assert open_store(config.goodput_store).read(config.run_name)[0] == []


def test_elastic_enabled_picks_the_elastic_classes(make_config):
    config = make_config(elastic_enabled=True)
    assert isinstance(mt.create_goodput_recorder(config), ElasticGoodputRecorder)
    from goodput_core.compat.monitoring_elastic import ElasticGoodputMonitor

    with mt.maybe_monitor_goodput(config) as start:
        assert isinstance(start.wait(30), ElasticGoodputMonitor)


def test_monitor_gets_every_flag(make_config, monkeypatch):
    built = {}

    class SpyMonitor:
        def __init__(self, **kwargs):
            built.update(kwargs)
            self.calls = []

        def __getattr__(self, name):
            return lambda *a, **k: built.setdefault("calls", []).append((name, a))

    monkeypatch.setattr("goodput_core.compat.monitoring.GoodputMonitor", SpyMonitor)
    config = make_config(goodput_upload_interval_seconds=15, step_deviation_interval_seconds=45,
                         enable_pathways_goodput=True, enable_gcp_goodput_metrics=True,
                         enable_gcp_step_deviation_metrics=True,
                         report_performance_metric_for_gcp_monitoring=True,
                         goodput_prometheus_port=0, goodput_rolling_windows="60,3600",
                         goodput_ideal_step_time=2.0)
    with mt.maybe_monitor_goodput(config):
        pass
    assert built["job_name"] == config.run_name
    assert built["logger_name"] == f"goodput_{config.run_name}"
    assert built["tensorboard_dir"] == os.path.join(
        config.base_output_directory, config.run_name, "tensorboard", "")
    assert built["upload_interval"] == 15 and built["step_deviation_interval_seconds"] == 45
    assert built["pathway_enabled"] is True and built["include_badput_breakdown"] is True
    assert built["include_step_deviation"] is True
    assert built["gcp_options"].enable_gcp_goodput_metrics is True
    assert built["gcp_options"].enable_gcp_step_deviation_metrics is False
    assert built["prometheus_port"] == 0 and built["configured_ideal_step_time"] == 2.0
    assert built["store"] == config.goodput_store and built["clock"] is config._goodput_clock
    names = [name for name, _ in built["calls"]]
    assert names == ["start_goodput_uploader", "start_step_deviation_uploader",
                     "start_rolling_window_goodput_uploader",
                     "stop_rolling_window_goodput_uploader", "stop_step_deviation_uploader",
                     "stop_goodput_uploader"]
    assert built["calls"][2][1] == ([60, 3600],)


def test_bad_flag_fails_before_the_block_runs(make_config):
    config = make_config(goodput_upload_interval_seconds="often")
    ran = []
    with pytest.raises(ValueError, match="goodput_upload_interval_seconds"):
        with mt.maybe_monitor_goodput(config):
            ran.append(1)
    assert ran == []
    with pytest.raises(ValueError, match="goodput_store"):
        mt.create_goodput_recorder(make_config(goodput_store=3.5))


def test_record_goodput_contract(make_config):
    calls = []

    class Rec:
        def record_step_start_time(self, step):
            calls.append(("start", step))

        def record_step_end_time(self, step):
            calls.append(("end", step))

        def record_broken(self):
            raise RuntimeError("broken")

    rec = Rec()
    mt.record_goodput(rec, "record_not_a_method")  # missing: skipped, as MaxText
    mt.record_goodput(rec, "record_broken")  # raising: logged, never raised
    with pytest.raises(KeyError):
        with mt.maybe_record_goodput(rec, mt.GoodputEvent.STEP, 7):
            raise KeyError("inside")
    with mt.maybe_record_goodput(rec, mt.GoodputEvent.STEP, 8):
        pass
    assert calls == [("start", 7), ("start", 8), ("end", 8)]


def test_process_index_without_hook_uses_jax_or_zero(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "jax", None)  # "not installed"
    assert helpers.process_index(None) == 0


class ReadOnlyConfig:
    """Like MaxText's pyconfig.HyperParameters: attribute reads, writes refused."""

    def __init__(self, flags):
        object.__setattr__(self, "_flags", dict(flags))

    def __getattr__(self, name):
        try:
            return object.__getattribute__(self, "_flags")[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        raise ValueError("Configuration is read-only and cannot be modified after "
                         "initialization.")


def test_report_performance_metric_with_a_read_only_config(make_config, monkeypatch):
    # MaxText's own helper assigns config.enable_gcp_step_deviation_metrics = False
    # here and fails with the ValueError above; ours reads the flags only.
    built = {}
    monkeypatch.setattr("goodput_core.compat.monitoring.GoodputMonitor",
                        lambda **kw: built.update(kw) or types.SimpleNamespace(
                            **{n: (lambda *a: None) for n in (
                                "start_goodput_uploader", "start_step_deviation_uploader",
                                "stop_step_deviation_uploader", "stop_goodput_uploader")}))
    config = ReadOnlyConfig(vars(make_config(report_performance_metric_for_gcp_monitoring=True,
                                             enable_gcp_step_deviation_metrics=True)))
    with pytest.raises(ValueError, match="read-only"):
        config.enable_gcp_step_deviation_metrics = False
    with mt.maybe_monitor_goodput(config):
        pass
    assert built["gcp_options"].enable_gcp_step_deviation_metrics is False
    assert config.enable_gcp_step_deviation_metrics is True
