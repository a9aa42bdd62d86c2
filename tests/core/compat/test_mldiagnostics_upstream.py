"""The ML-diagnostics SDK's interface checked against the installed SDK
(``google-cloud-mldiagnostics`` 1.0.10) where it runs without credentials:
its types and their layout, its run-name rule, its region check; and the
behaviour of runs and metrics a program written for the SDK relies on."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import inspect
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

import google_cloud_mldiagnostics as sdk  # the test extra installs the SDK
from goodput_core.compat import mldiagnostics as mld
from goodput_core.compat.mldiagnostics import _state, exceptions, machinelearning_run, metrics
from goodput_core.compat.mldiagnostics.custom_types import mlrun_types
from goodput_core.compat.mldiagnostics.metric_types import MetricType
from goodput_core.events import Kind
from goodput_core.queries.calculator import Calculator
from goodput_core.stores import open_store
from tests.support.fake_clock import FakeClock

ROOT = Path(__file__).resolve().parents[3]
T0 = 1_700_000_000.0
_PLACE_ENV = ("RUN_WORKLOAD_ID", "SLURM_JOB_ID", "GKE_DIAGON_METADATA", "DIAGON_BASE_URL")


@pytest.fixture(autouse=True)
def no_run_left(monkeypatch):
    for env in _PLACE_ENV:
        monkeypatch.delenv(env, raising=False)
    mld.end_run()
    _state._pending.clear()
    _state._counts.clear()
    yield
    mld.end_run()


def new_run(clock, **kwargs):
    url = f"memory://mldu-{uuid.uuid4().hex}"
    kwargs.setdefault("name", "exp")
    return machinelearning_run(store=url, clock=clock, process_index=0, **kwargs), url


def calc_of(run, url):
    run.recorder.flush(10)
    calc = Calculator(run.name, url, clock=lambda: T0 + 1000)
    calc.refresh()
    return calc


# ------------------------------------------------------------------ the types
def _members(cls):
    return [(m.name, m.value) for m in cls]


def test_custom_types_are_the_sdks_at_the_same_path():
    from google_cloud_mldiagnostics.custom_types import exceptions as sdk_exc
    from google_cloud_mldiagnostics.custom_types import mlrun_types as sdk_types

    sdk_enums = {n for n, c in vars(sdk_types).items()
                 if inspect.isclass(c) and issubclass(c, enum.Enum)}
    assert sdk_enums == {n for n in mlrun_types.__all__
                         if issubclass(getattr(mlrun_types, n), enum.Enum)}
    for name in sdk_enums:
        ours, theirs = getattr(mlrun_types, name), getattr(sdk_types, name)
        assert _members(ours) == _members(theirs), name
        assert issubclass(ours, str) == issubclass(theirs, str), name
    theirs = [f.name for f in dataclasses.fields(sdk_types.MLRun)]
    ours = [f.name for f in dataclasses.fields(mlrun_types.MLRun)]
    assert ours[:len(theirs)] == theirs  # the SDK's fields in its order; ours come after
    sdk_classes = {n for n, c in vars(sdk_exc).items() if inspect.isclass(c)}
    assert sdk_classes <= set(exceptions.__all__)
    assert "ControlPlaneClientNotInitializedError" in sdk_classes
    assert mld.custom_types.exceptions.ProfilingError is exceptions.ProfilingError
    assert mld.custom_types.metric_types.MetricType is MetricType


def test_core_xprof_is_the_sdks():
    def params(fn):
        return [(p.name, p.default, p.kind) for p in inspect.signature(fn).parameters.values()]

    for fn in ("start_on_demand_xprof", "stop_on_demand_xprof"):
        assert params(getattr(mld.core.xprof, fn)) == params(getattr(sdk.core.xprof, fn))
    assert mld.core.xprof.Xprof is mld.xprof


def test_the_run_has_the_sdks_enums():
    run, _ = new_run(FakeClock(T0), application_framework="maxtext",
                     framework=sdk.custom_types.mlrun_types.Framework.PYTORCH)
    assert run.framework == mlrun_types.Framework.PYTORCH
    assert run.application_framework == mlrun_types.ApplicationFramework.MAXTEXT
    assert run.serving_engine == mlrun_types.ServingEngine.NONE
    assert run.run_phase == mlrun_types.RunPhase.PHASE_ACTIVE
    assert run.orchestrator == mlrun_types.Orchestrator.NONE == "NONE"
    mld.end_run()
    assert run.run_phase == mlrun_types.RunPhase.PHASE_COMPLETED
    with pytest.raises(exceptions.MLRunConfigurationError, match="Invalid framework"):
        new_run(FakeClock(T0), framework="tensorflow")


# ------------------------------------------------------------------ run names
@pytest.mark.parametrize("name", ["My Run_1", "exp-1", "  A//B..c  ", "UPPER", "x__y--z"])
def test_run_names_follow_the_sdks_rule(name):
    from google_cloud_mldiagnostics.utils import host_utils

    run, _ = new_run(FakeClock(T0), name=name)
    stamp = datetime.datetime.fromtimestamp(T0).strftime("%Y%m%d%H%M%S")
    assert run.name == host_utils.sanitize_identifier(name + "-" + stamp)
    assert run.display_name == name


def test_a_workload_id_names_the_run(monkeypatch):
    run, _ = new_run(FakeClock(T0), name="Exp", run_workload_id="Job 42")
    assert (run.name, run.orchestrator, run.workload_id) == ("exp-job-42", "CUSTOM", "Job 42")
    monkeypatch.setenv("RUN_WORKLOAD_ID", "env-id")
    assert new_run(FakeClock(T0), name="Exp")[0].name == "exp-env-id"
    monkeypatch.delenv("RUN_WORKLOAD_ID")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    run, _ = new_run(FakeClock(T0), name="Exp")
    assert (run.name, run.orchestrator) == ("exp-slurm-77", "SLURM")


_SCRIPT = textwrap.dedent("""
    import sys
    from goodput_core.compat.mldiagnostics import machinelearning_run, metrics
    run = machinelearning_run(name="My Script", store=sys.argv[1], process_index=0)
    metrics.record("loss", 1.0, step=int(sys.argv[2]))
    print(run.name)
""")


def _run_script(store, step, env):
    return subprocess.run([sys.executable, "-c", _SCRIPT, store, str(step)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, **env}, check=True).stdout.strip()


def test_running_a_script_twice_gives_two_runs_unless_a_workload_id_joins_them(tmp_path):
    env = {k: "" for k in _PLACE_ENV}
    store = f"sqlite:///{tmp_path / 's.sqlite'}"
    # two runs a second apart (the names carry the time to the second)
    first = _run_script(store, 1, env)
    second = first
    while second == first:
        second = _run_script(store, 2, env)
    assert first.startswith("my-script-") and second.startswith("my-script-")
    assert sorted(open_store(store).runs()) == sorted([first, second])
    # the same workload id on both processes: one run, the second a restart
    joined = [_run_script(store, s, {**env, "RUN_WORKLOAD_ID": "w1"}) for s in (1, 2)]
    assert joined == ["my-script-w1"] * 2
    events, _ = open_store(store).read("my-script-w1")
    assert [e.kind for e in events].count(Kind.JOB_START) == 2


# ------------------------------------------------------------------- regions
@pytest.mark.parametrize("region", ["us-central1", "europe-west4", "us-gov-west1",
                                    "us-central1-a", "asia-east1-b", "central1", "US-CENTRAL1",
                                    "us-central", ""])
def test_regions_are_checked_as_the_sdk(region):
    from google_cloud_mldiagnostics.utils import gcp

    try:
        gcp.validate_region(region)
        sdk_ok = True
    except ValueError:
        sdk_ok = False
    if sdk_ok:
        new_run(FakeClock(T0), region=region)
    else:
        with pytest.raises(exceptions.MLRunConfigurationError, match="region"):
            new_run(FakeClock(T0), region=region)
        assert mld.active_run() is None
    # with base_url (the SDK's self-hosted control plane) it is not checked
    new_run(FakeClock(T0), region=region, base_url="http://127.0.0.1:1")


# ------------------------------------------------------------------- metrics
def test_the_sdks_own_metric_types_are_recorded():
    run, url = new_run(FakeClock(T0))
    metrics.record(sdk.metric_types.MetricType.LOSS, 2.5, step=1)
    metrics.record_metrics([{"metric_name": sdk.metric_types.MetricType.MFU, "value": 40}])
    calc = calc_of(run, url)
    assert calc.metrics("loss").values.tolist() == [2.5]
    assert calc.metrics("mfu").values.tolist() == [40]
    assert calc.cumulative(T0 + 5).last_step == 1
    assert _state.stats().get("bad_metric", 0) == 0


def test_system_metrics_are_dropped_unless_log_system_metrics():
    from google_cloud_mldiagnostics.core import metrics as sdk_core

    # the SDK's own list of system metrics is ours
    assert _state.SYSTEM_METRICS == sdk_core._SYSTEM_METRICS
    run, url = new_run(FakeClock(T0))
    metrics.record(MetricType.HBM_UTILIZATION, 50.0, step=1)
    metrics.record("host_cpu_utilization", 10.0)
    metrics.record(MetricType.LOSS, 1.0, step=1)
    calc = calc_of(run, url)
    assert calc.metrics("hbm_utilization").values.tolist() == []
    assert calc.metrics("loss").values.tolist() == [1.0]
    assert metrics.stats()["system_metric"] == 2
    run, url = new_run(FakeClock(T0), log_system_metrics=True)
    metrics.record(MetricType.HBM_UTILIZATION, 50.0, step=1)
    assert calc_of(run, url).metrics("hbm_utilization").values.tolist() == [50.0]


def test_a_step_beyond_64_bits_drops_that_point_only():
    clock = FakeClock(T0)
    run, url = new_run(clock)
    for step in range(1, 201):
        clock.advance(1.0)
        metrics.record(MetricType.LOSS, 1.0, step=step)
        if step == 100:
            metrics.record(MetricType.LOSS, 9.0, step=2**63)
    clock.advance(1.0)
    mld.end_run()
    calc = calc_of(run, url)
    # 200 steps, each started by its metric 1 s after the previous (job start at T0)
    assert calc.cumulative(T0 + 1000).last_step == 200
    assert len(calc.metrics("loss").values) == 200
    assert metrics.stats()["bad_step"] == 1
