"""System metrics of ``log_system_metrics=True`` (and the opt-in sampler):
real psutil on this CPU machine, a fake clock and a wait that advances it
instead of sleeping. NVML and libtpu run for real only on a GPU or TPU
machine (tests/external/system_metrics_check.py); here their libraries find
no device, which is what a CPU machine must survive."""

from __future__ import annotations

import threading
import uuid

import pytest

from goodput_core.compat import mldiagnostics as mld
from goodput_core.compat.mldiagnostics import _state, _system_sources, machinelearning_run
from goodput_core.compat.mldiagnostics.custom_types.exceptions import MLRunConfigurationError
from goodput_core.compat.mldiagnostics.system_metrics import SystemMetrics, stored_name
from goodput_core.queries.calculator import Calculator
from tests.support.fake_clock import FakeClock

T0 = 1_700_000_000.0
psutil = pytest.importorskip("psutil")


@pytest.fixture(autouse=True)
def no_run_left(monkeypatch):
    for env in ("RUN_WORKLOAD_ID", "SLURM_JOB_ID", "GKE_DIAGON_METADATA", "LOCAL_RANK",
                "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"):
        monkeypatch.delenv(env, raising=False)
    mld.end_run()
    yield
    mld.end_run()
    _state._pending.clear()


class Ticks:
    """The sampler's wait: blocks until the test releases it (the first
    wait), then advances the fake clock by the interval, ``n`` times, and
    then asks the sampler to stop. No wall-clock sleep anywhere."""

    def __init__(self, clock: FakeClock, n: int):
        self.clock, self.left = clock, n
        self.gate = threading.Event()
        self.done = threading.Event()
        self.callers = set()

    def __call__(self, seconds: float) -> bool:
        self.callers.add(threading.get_ident())
        assert self.gate.wait(30), "the test never released the sampler"
        if self.left == 0:
            self.done.set()
            return True
        self.left -= 1
        self.clock.advance(seconds)
        return False


def _spy_threads(monkeypatch):
    """Records the threads that open and sample the host source."""
    seen = []
    for method in ("open", "sample"):
        real = getattr(_system_sources.HostSource, method)

        def spy(self, _real=real):
            seen.append(threading.get_ident())
            return _real(self)
        monkeypatch.setattr(_system_sources.HostSource, method, spy)
    return seen


def _series(run, url, name):
    run.recorder.flush(10)
    calc = Calculator(run.name, url, clock=lambda: T0 + 10_000)
    calc.refresh()
    return calc.metrics(name)


def test_log_system_metrics_stores_host_metrics_at_the_interval_off_the_training_thread(
        monkeypatch):
    clock = FakeClock(T0)
    ticks = Ticks(clock, 5)
    seen = _spy_threads(monkeypatch)
    url = f"memory://sys-{uuid.uuid4().hex}"
    run = machinelearning_run("sys-run", store=url, clock=clock, log_system_metrics=True,
                              metrics_record_interval_sec=10, system_metrics_wait=ticks)
    sampler = _state.current().system_metrics
    # the call returned before any sample: the training thread only started a thread
    assert sampler.stats()["samples"] == 0
    ticks.gate.set()
    assert ticks.done.wait(30)
    sampler.thread.join(30)
    stats = sampler.stats()
    mld.end_run()

    main = threading.get_ident()
    assert seen and main not in seen and ticks.callers == {sampler.thread.ident}
    cpu = _series(run, url, "host_cpu_utilization")
    mem = _series(run, url, "host_memory_utilization")
    expected = [T0 + 10 * k for k in range(1, 6)]
    assert cpu.times.tolist() == expected and mem.times.tolist() == expected
    assert all(0.0 <= v <= 100.0 for v in cpu.values.tolist() + mem.values.tolist())
    assert stats["samples"] == 5 and stats["sources"][0] == "host"
    # under 1 % of one core: CPU seconds the sampler spent over the time it covered
    assert stats["cpu_seconds"] / (stats["samples"] * 10.0) < 0.01


def test_no_sampler_without_log_system_metrics_or_with_a_zero_interval_or_off_local_rank_0(
        monkeypatch):
    clock = FakeClock(T0)
    machinelearning_run("a", store="memory://sys-a", clock=clock)
    assert _state.current().system_metrics is None
    machinelearning_run("b", store="memory://sys-b", clock=clock, log_system_metrics=True,
                        metrics_record_interval_sec=0)
    assert _state.current().system_metrics is None
    monkeypatch.setenv("LOCAL_RANK", "1")   # the SDK: the local master process samples
    machinelearning_run("c", store="memory://sys-c", clock=clock, log_system_metrics=True)
    assert _state.current().system_metrics is None
    with pytest.raises(MLRunConfigurationError, match="metrics_record_interval_sec"):
        machinelearning_run("d", store="memory://sys-d", clock=clock,
                            metrics_record_interval_sec="often")


class _Fixed(_system_sources.Source):
    def __init__(self, name, values=None, fail=False):
        self.name, self.values, self.fail = name, values or {}, fail
        self.closed = False

    def open(self):
        return True

    def sample(self):
        if self.fail:
            raise RuntimeError("driver gone")
        return dict(self.values)

    def close(self):
        self.closed = True


class _Points:
    def __init__(self):
        self.points = []

    def record_metric(self, name, value, step=None, time=None):
        self.points.append((name, value, time))


def test_other_hosts_keep_their_series_apart_and_a_failing_source_is_counted():
    clock = FakeClock(T0)
    ticks = Ticks(clock, 2)
    ticks.gate.set()
    good = _Fixed("libtpu", {"tpu_duty_cycle": 90.0})
    bad = _Fixed("nvml", fail=True)
    sink = _Points()
    sampler = SystemMetrics(sink, interval_s=2.5, process_index=3, clock=clock, wait=ticks,
                            sources=[bad, good]).start()
    sampler.thread.join(30)
    assert sink.points == [("tpu_duty_cycle{process_index=3}", 90.0, T0 + 2.5),
                           ("tpu_duty_cycle{process_index=3}", 90.0, T0 + 5.0)]
    assert sampler.stats()["failed"] == {"nvml": 2}
    assert good.closed and bad.closed
    assert stored_name("hbm_utilization", 0) == "hbm_utilization"


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="interval_s"):
        SystemMetrics(_Points(), interval_s=0)
    with pytest.raises(ValueError, match="record_metric"):
        SystemMetrics(object())


def test_gpu_and_tpu_sources_offer_nothing_on_a_machine_without_them():
    # the real nvidia-ml-py (installed with the SDK) finds no driver here, and
    # libtpu is not installed: neither raises, neither reports a metric
    assert _system_sources.NvmlSource().open() is False
    assert _system_sources.LibtpuSource().open() is False
    host = _system_sources.HostSource()
    assert host.open() is True
    assert set(host.sample()) == {"host_cpu_utilization", "host_memory_utilization"}


def test_stop_wakes_the_default_wait_at_once():
    sink = _Points()
    sampler = SystemMetrics(sink, interval_s=3600, sources=[_Fixed("host", {"x": 1.0})]).start()
    assert sampler.stop(30) is True      # not after an hour: the stop event ends the wait
    assert sink.points == [] and not sampler.running
