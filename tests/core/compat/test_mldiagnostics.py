"""The ML-diagnostics SDK's interface on our engine, without jax: the API
against the installed SDK, what a run records, and bad use."""

from __future__ import annotations

import inspect
import json
import logging
import math
import subprocess
import sys
import datetime
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest

from goodput_core.queries.calculator import Calculator
from goodput_core.compat import mldiagnostics as mld
from goodput_core.compat.mldiagnostics import (
    _state,
    exceptions,
    machinelearning_run,
    metric_types,
    metrics,
    xprof,
)
from goodput_core.compat.mldiagnostics.custom_types.mlrun_types import (
    ApplicationFramework,
    Framework,
    RunPhase,
)
from goodput_core.compat.mldiagnostics.metric_types import MetricType
from tests.support.fake_clock import FakeClock

ROOT = Path(__file__).resolve().parents[3]
T0 = 1_700_000_000.0
# off GKE the SDK appends the local time of the call (YYYYmmddHHMMSS) to the name
STAMP = datetime.datetime.fromtimestamp(T0).strftime("%Y%m%d%H%M%S")
_PLACE_ENV = ("RUN_WORKLOAD_ID", "SLURM_JOB_ID", "GKE_DIAGON_METADATA", "DIAGON_BASE_URL",
              "LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK")


@pytest.fixture(autouse=True)
def no_run_left(monkeypatch):
    """Every test starts and ends without an active run or pending metrics,
    and without the variables that tell where it runs (GKE, Slurm...)."""
    for env in _PLACE_ENV:
        monkeypatch.delenv(env, raising=False)
    mld.end_run()
    _state._pending.clear()
    _state._counts.clear()
    yield
    mld.end_run()
    _state._pending.clear()


@pytest.fixture
def clock():
    return FakeClock(T0)


def new_run(clock, **kwargs):
    url = f"memory://mld-{uuid.uuid4().hex}"
    kwargs.setdefault("name", "exp-1")
    return machinelearning_run(store=url, clock=clock, process_index=kwargs.pop("index", 0),
                               **kwargs), url


def calc_of(run, url, now=None):
    run.recorder.flush(10)
    calc = Calculator(run.name, url, clock=lambda: now or T0 + 1000)
    calc.refresh()
    return calc


# ------------------------------------------------------------- the SDK's API
import google_cloud_mldiagnostics as sdk  # noqa: E402 - the test extra installs the SDK


def _params(fn):
    return [(p.name, getattr(p.default, "value", p.default), p.kind)
            for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("ours, theirs", [
    (machinelearning_run, sdk.machinelearning_run),
    (metrics.record, sdk.metrics.record),
    (metrics.record_metrics, sdk.metrics.record_metrics),
    (xprof.__init__, sdk.xprof.__init__),
    (xprof.start, sdk.xprof.start),
    (xprof.stop, sdk.xprof.stop),
])
def test_signatures_are_the_sdks(ours, theirs):
    """Same names, order, kinds and defaults (enum defaults by value); ours
    only add keyword-only arguments after the SDK's."""
    mine, sdks = _params(ours), _params(theirs)
    assert mine[:len(sdks)] == sdks
    assert all(kind == inspect.Parameter.KEYWORD_ONLY for _, _, kind in mine[len(sdks):])


def test_layout_metric_types_and_exceptions_are_the_sdks():
    assert {m.name: m.value for m in MetricType} == {
        m.name: m.value for m in sdk.metric_types.MetricType}
    assert metric_types.METRIC_UNITS == sdk.metric_types.METRIC_UNITS
    assert inspect.isclass(xprof) and inspect.isclass(sdk.xprof)
    assert inspect.ismodule(metrics) and inspect.ismodule(metric_types)
    from google_cloud_mldiagnostics.custom_types import exceptions as sdk_exc

    for name in exceptions.__all__:
        ours, theirs = getattr(exceptions, name), getattr(sdk_exc, name)
        assert [b.__name__ for b in ours.__bases__] == [b.__name__ for b in theirs.__bases__]


def test_the_sdks_enums_are_accepted(clock):
    from google_cloud_mldiagnostics.custom_types import mlrun_types

    run, _ = new_run(clock, framework=mlrun_types.Framework.JAX,
                     application_framework=mlrun_types.ApplicationFramework.MAXTEXT,
                     rl_orchestrator="tunix")
    assert (run.framework, run.application_framework) == (Framework.JAX,
                                                           ApplicationFramework.MAXTEXT)


def test_importing_it_imports_no_framework():
    code = ("import sys; import goodput_core.compat.mldiagnostics as m; "
            "print(sorted(k for k in ('jax', 'numpy', 'google.cloud.storage') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------ what a run records
def test_a_run_records_job_configs_metrics_and_steps(clock, tmp_path):
    run, url = new_run(clock, run_group="slice-sweep", gcs_path=str(tmp_path) + "//p/",
                       configs={"epochs": 3, "opt": {"lr": 0.1}}, project="p")
    assert run.display_name == "exp-1" and run.name == f"exp-1-{STAMP}"
    assert run.run_phase == RunPhase.PHASE_ACTIVE
    assert run.gcs_path == f"{tmp_path}/p" and run.profile_dir == f"{tmp_path}/p/{run.name}"
    # the run's userConfigs are strings, as the SDK makes them; the store keeps the values
    from google_cloud_mldiagnostics.utils import config_utils

    assert run.configs.userConfigs == config_utils.sanitize_config(
        {"epochs": 3, "opt": {"lr": 0.1}}) == {"epochs": "3", "opt": "{'lr': 0.1}"}
    assert set(run.configs) == {"softwareConfigs", "hardwareConfigs", "userConfigs"}
    assert run.configs.softwareConfigs["framework"] == "JAX"
    for step in (1, 2, 3):
        clock.advance(2.0)
        metrics.record(MetricType.LOSS, 4.0 - step, step=step)
        metrics.record_metrics([{"metric_name": MetricType.MFU, "value": 40 + step},
                                {"metric_name": "custom", "value": [1, 2, 6]},
                                {"metric_name": "lr", "value": 0.1, "step": 0}], step=step)
    clock.advance(2.0)
    metrics.record("eval_loss", 0.5, step=3, labels={"split": "eval", "a": "1"})
    mld.end_run()
    assert run.run_phase == RunPhase.PHASE_COMPLETED
    calc = calc_of(run, url)
    meta = calc.metadata()
    assert meta["run_group"] == "slice-sweep"
    assert meta["configs"] == {"epochs": 3, "opt": {"lr": 0.1}}
    assert meta["software_configs"]["framework"] == "JAX"
    assert meta["mldiagnostics"]["project"] == "p"
    assert calc.metrics("loss").values.tolist() == [3.0, 2.0, 1.0]
    assert calc.metrics("loss").steps.tolist() == [1, 2, 3]
    assert calc.metrics("mfu").values.tolist() == [41, 42, 43]
    assert calc.metrics("custom").values.tolist() == [3.0] * 3  # a list: its mean
    assert calc.metrics("lr").steps.tolist() == [0] * 3  # the item's own step wins
    assert calc.metrics("eval_loss{a=1,split=eval}").values.tolist() == [0.5]
    # job start T0, steps 1..3 start at T0+2, +4, +6 (their first metric), job end T0+8
    result = calc.cumulative(T0 + 1000)
    assert result.total_seconds == pytest.approx(8.0)
    assert result.last_step == 3 and result.disruptions == 0
    assert result.productive_seconds == pytest.approx(6.0)


def test_steps_from_metrics_off_and_a_step_metric(clock):
    run, url = new_run(clock, steps_from_metrics=False)
    metrics.record(MetricType.LOSS, 1.0, step=5)
    assert calc_of(run, url).cumulative(T0 + 10).last_step == 0
    run, url = new_run(clock, name="exp-2")
    clock.advance(1)
    metrics.record(MetricType.STEP, 7)  # the step number as a metric marks the step too
    clock.advance(1)
    metrics.record(MetricType.LOSS, 1.0, step=np.int64(8))  # numpy integers are steps
    calc = calc_of(run, url)
    assert calc.cumulative(T0 + 10).last_step == 8
    assert calc.metrics("step").values.tolist() == [7.0]


def test_only_process_zero_records_unless_on_all_hosts(clock):
    run, url = new_run(clock, index=1)
    metrics.record(MetricType.LOSS, 1.0, step=1)
    metrics.record(MetricType.LOSS, 2.0, step=1, record_on_all_hosts=True)
    calc = calc_of(run, url)
    assert calc.metrics("loss").values.tolist() == [2.0]
    assert calc.lifetime(T0 + 5) is None  # job start and steps are process 0's
    assert "configs" not in calc.metadata()


def test_config_updates_are_recorded(clock):
    run, url = new_run(clock, configs={"epochs": 100})
    run.configs.update({"epochs": 300, "optimizer": "adam"})
    run.configs.batch_size = 64
    assert run.configs.batch_size == 64
    assert calc_of(run, url).metadata()["configs"] == {
        "epochs": 300, "optimizer": "adam", "batch_size": 64}


@pytest.mark.parametrize("suffix, text", [
    (".yaml", "epochs: 3\nmodel:\n  layers: 2\n"),
    (".json", '{"epochs": 3, "model": {"layers": 2}}'),
])
def test_configs_from_yaml_and_json(clock, tmp_path, suffix, text):
    import yaml

    path = tmp_path / f"cfg{suffix}"
    path.write_text(text)
    loaded = yaml.safe_load(text) if suffix == ".yaml" else json.loads(text)
    run, url = new_run(clock, configs=loaded)  # the SDK's way: a dict
    assert calc_of(run, url).metadata()["configs"] == {"epochs": 3, "model": {"layers": 2}}
    run, url = new_run(clock, name="by-path", configs=str(path))  # ours: the path
    meta = calc_of(run, url).metadata()
    assert meta["configs"] == {"epochs": 3, "model": {"layers": 2}}
    assert meta["config_path"] == str(path)


def test_where_profiles_go(clock, monkeypatch, tmp_path):
    monkeypatch.delenv("GOODPUT_PROFILE_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    run, _ = new_run(clock)
    name = f"exp-1-{STAMP}"
    assert run.profile_dir == str(tmp_path / "data" / "goodput" / "profiles" / name)
    monkeypatch.setenv("GOODPUT_PROFILE_DIR", str(tmp_path / "p"))
    assert new_run(clock, gcs_path="gs://b/x")[0].profile_dir == str(tmp_path / "p" / name)
    assert new_run(clock, gcs_path=str(tmp_path / "g"))[0].profile_dir == str(
        tmp_path / "g" / name)
    assert new_run(clock, profile_dir=str(tmp_path / "own"))[0].profile_dir == str(
        tmp_path / "own")


def test_gke_adds_the_workload_creation_time(clock, monkeypatch):
    monkeypatch.setenv("GKE_DIAGON_METADATA",
                       json.dumps({"creation-timestamp": "2025-03-04T05:06:07Z"}))
    run, _ = new_run(clock)
    assert (run.name, run.display_name) == ("exp-1-20250304-050607", "exp-1")
    assert run.orchestrator == "GKE"


@pytest.mark.parametrize("kwargs, needle", [
    (dict(name=""), "name is required"),
    (dict(environment="dev"), "environment must be one of"),
    (dict(application_framework="keras"), "Invalid application_framework"),
    (dict(run_group=5), "run_group"),
    (dict(configs=[1, 2]), "configs must be a dict"),
    (dict(configs="/nonexistent/cfg.yaml"), "configs:"),
    (dict(store="nosuchscheme://x"), "store:"),
])
def test_bad_arguments_raise_the_sdks_error(clock, kwargs, needle):
    # a store of its own: never the user's default store (whatever is in it)
    base = {"name": "x", "clock": clock, "store": f"memory://mld-{uuid.uuid4().hex}"}
    with pytest.raises(exceptions.MLRunConfigurationError, match=needle):
        machinelearning_run(**{**base, **kwargs})
    assert mld.active_run() is None


# ------------------------------------------------------------------- bad use
def test_metrics_before_a_run_go_into_the_next_run(clock):
    metrics.record(MetricType.LOSS, 9.0, step=1)
    metrics.record_metrics([{"metric_name": "early", "value": 1.5}])
    assert mld.active_run() is None
    run, url = new_run(clock)
    calc = calc_of(run, url)
    assert calc.metrics("loss").values.tolist() == [9.0]
    assert calc.metrics("early").values.tolist() == [1.5]


def test_bad_names_and_values_are_counted_not_raised(clock, caplog):
    run, url = new_run(clock)
    with caplog.at_level(logging.WARNING, "goodput"):
        metrics.record(None, 1.0)
        metrics.record(5, 1.0)
        metrics.record(MetricType.LOSS, "text")
        metrics.record(MetricType.LOSS, {"a": 1})
        metrics.record(MetricType.LOSS, [])
        metrics.record(MetricType.LOSS, 1.0, labels="x")
        metrics.record_metrics(["not a dict"])
        metrics.record_metrics(None)
    # text and a dict: the SDK sends them as log entries; here counted apart, not recorded
    assert metrics.stats()["bad_metric"] == 6 and metrics.stats()["non_numeric"] == 2
    assert sum("metrics.record" in r.getMessage() for r in caplog.records) == 1
    metrics.record(MetricType.LOSS, 1.0)  # still recording
    assert calc_of(run, url).metrics("loss").values.tolist() == [1.0]


def test_nan_is_skipped_and_counted_by_the_engine(clock):
    run, url = new_run(clock)
    metrics.record(MetricType.LOSS, math.nan, step=1)
    metrics.record(MetricType.LOSS, math.inf, step=2)
    metrics.record(MetricType.LOSS, 0.5, step=3)
    calc = calc_of(run, url)
    assert calc.metrics("loss").values.tolist() == [0.5]
    assert calc.skipped["non_finite"] == 2


def test_strict_runs_raise_the_sdks_recording_error(clock):
    new_run(clock, strict=True)
    with pytest.raises(exceptions.RecordingError):
        metrics.record(MetricType.LOSS, "nan-ish text")


def test_xprof_without_a_run_or_a_place_for_traces_raises_as_the_sdk(clock):
    ran = []
    with pytest.raises(exceptions.ProfilingError, match="No active ML run"):
        with xprof():
            ran.append(1)

    @xprof()
    def fn(x):
        ran.append(x)

    with pytest.raises(exceptions.ProfilingError, match="No active ML run"):
        fn(1)
    with pytest.raises(exceptions.ProfilingError, match="No active ML run"):
        xprof().start(session_id="s")
    new_run(clock)  # no gcs_path, no profile_dir, no $GOODPUT_PROFILE_DIR
    with pytest.raises(exceptions.ProfilingError, match="No GCS path"):
        xprof().start(session_id="s")
    assert ran == []  # the SDK raises before the block runs


def test_metric_only_run_captures_nothing(clock, tmp_path):
    new_run(clock, metric_only_run=True, gcs_path=str(tmp_path))
    prof = xprof()
    prof.start("s")
    assert prof._capture is None and prof.session_dir is None


# ------------------------------------------------- lifecycle in a real process
def test_an_unhandled_exception_is_a_disruption_and_exit_is_a_job_end(tmp_path):
    store = tmp_path / "life.sqlite"
    script = textwrap.dedent(f"""
        import sys
        from goodput_core.compat.mldiagnostics import machinelearning_run, metrics
        machinelearning_run(name=sys.argv[1], store={str(store)!r}, process_index=0,
                            run_workload_id="w")
        metrics.record("loss", 1.0, step=1)
        if sys.argv[1] == "crash":
            raise RuntimeError("boom")
    """)
    for name in ("ok", "crash"):
        subprocess.run([sys.executable, "-c", script, name], capture_output=True, timeout=60,
                       cwd=ROOT)
    from goodput_core.stores import open_store

    kinds = {}
    for name in ("ok", "crash"):
        events, _ = open_store(f"sqlite:///{store}").read(f"{name}-w")
        kinds[name] = [e.kind for e in events]
    from goodput_core.events import Kind

    assert Kind.JOB_END in kinds["ok"] and Kind.DISRUPTION not in kinds["ok"]
    assert Kind.DISRUPTION in kinds["crash"] and Kind.JOB_END not in kinds["crash"]
