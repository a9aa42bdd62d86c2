"""Newer MaxText's flags under the launcher: a replay of ``train.py``'s call
order with the newer helper (tests/support/maxtext_newer.py says where each
line comes from), on a fake clock, with no Google credentials on hand.

* ``enable_rolling_window_goodput`` / ``rolling_windows_seconds``: rolling
  figures published, the rolling uploader stopped before the cumulative one;
* ``managed_mldiagnostics*``: the run reaches our diagnostics compat through
  the ``google_cloud_mldiagnostics`` alias and shows in ``goodput runs --group``;
* ``report_heartbeat_metric_for_gcp_monitoring`` /
  ``report_performance_metric_for_gcp_monitoring``: metrics of the run, and
  the job is not stopped by ``DefaultCredentialsError``.
"""

from __future__ import annotations

import io
import threading
import json
import sys
import time
import uuid
from contextlib import redirect_stdout

import pytest

from goodput_core import flush_all, open_store
from goodput_core.compat import mldiagnostics as mld
from goodput_core.compat import monitoring as compat_monitoring
from goodput_core.events import to_payload
from goodput_core.queries.calculator import Calculator
from goodput_integrations.maxtext import launch
from tests.support.maxtext_newer import write_fake_maxtext
from tests.support.tfevents import read_scalars

pytestmark = pytest.mark.usefixtures("clean_reference")


@pytest.fixture
def no_google_credentials(monkeypatch, tmp_path):
    """This machine has no Google credentials; google-auth must find that out
    without the network (no GCE metadata probe)."""
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    from google.auth.compute_engine import _metadata

    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)


@pytest.fixture
def fake_maxtext(tmp_path, monkeypatch):
    train = write_fake_maxtext(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield train
    for name in [n for n in sys.modules if n == "maxtext" or n.startswith("maxtext.")]:
        del sys.modules[name]
    sys.modules.pop("maxtext_replay_logger", None)
    mld.end_run()


@pytest.fixture
def uploader_calls(monkeypatch):
    """The order in which the compat monitor's uploaders start and stop."""
    calls = []
    for name in ("start_goodput_uploader", "stop_goodput_uploader",
                 "start_rolling_window_goodput_uploader",
                 "stop_rolling_window_goodput_uploader"):
        real = getattr(compat_monitoring.GoodputMonitor, name)

        def spy(self, *args, _real=real, _name=name, **kwargs):
            calls.append((_name, *[list(a) for a in args if isinstance(a, (list, tuple))]))
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(compat_monitoring.GoodputMonitor, name, spy)
    return calls


def _wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def _runs_in_group(store, group):
    out = io.StringIO()
    from goodput_core.cli import main

    with redirect_stdout(out):
        assert main(["runs", "--store", store, "--group", group, "--json"]) == 0
    return json.loads(out.getvalue())


# MaxText's GCPWorkloadMonitor sets its termination event after building its
# client, so its __del__ fails on the instance whose constructor raised (below)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("performance", [False, True],
                         ids=["maxtexts-own-monitor", "read-only-config-fallback"])
def test_newer_maxtext_flags_through_the_launcher(fake_maxtext, tmp_path, clock,
                                                  no_google_credentials, uploader_calls,
                                                  performance):
    store = f"sqlite:///{tmp_path / 'goodput.sqlite'}"
    run, group = f"newer-{uuid.uuid4().hex[:6]}", f"sweep-{uuid.uuid4().hex[:4]}"
    out = tmp_path / "out"
    code = launch.main([f"--goodput-store={store}", "--goodput-no-checkpoint-stats",
                        "--goodput-rolling-windows=60", "--", "python3", str(fake_maxtext),
                        "base.yml", f"run_name={run}", f"base_output_directory={out}",
                        "enable_goodput_recording=true", "monitor_goodput=true",
                        "enable_gcp_goodput_metrics=false",
                        "enable_gcp_step_deviation_metrics=false",
                        "enable_rolling_window_goodput=true",
                        "rolling_windows_seconds=[3600,86400]",
                        "managed_mldiagnostics=true",
                        f"managed_mldiagnostics_run_group={group}",
                        "managed_mldiagnostics_on_demand_profiling=false",
                        "report_heartbeat_metric_for_gcp_monitoring=true",
                        f"report_performance_metric_for_gcp_monitoring="
                        f"{str(performance).lower()}"], clock=clock)
    assert code == 0  # no DefaultCredentialsError stopped it

    # rolling windows: MaxText's and the launcher's, started after the
    # cumulative uploader, stopped before it, each with its final upload
    names = [c[0] for c in uploader_calls]
    assert names == ["start_goodput_uploader", "start_rolling_window_goodput_uploader",
                     "stop_rolling_window_goodput_uploader", "stop_goodput_uploader"]
    scalars = read_scalars(str(out / run / "tensorboard" / "goodput"))
    for size in (60, 3600, 86400):
        assert scalars[f"goodput/rolling_{size}s"], size
    # a 17.5 s job: 2 s init, 3 s prep, a blocking 0.25 s load, then 10 steps whose
    # spans hold the next (overlapped) load: 9 x 1.25 s + the last step's 1 s
    goodput = 100 * 12.25 / 17.5
    assert scalars["goodput/rolling_3600s"][-1][1] == pytest.approx(goodput)

    # managed diagnostics: one run, MaxText's goodput run, with its group and metrics
    assert flush_all(10)
    payloads = [to_payload(e) for e in open_store(store).read(run)[0]]
    assert sum("job_start_time" in p for p in payloads) == 1
    assert sum("job_end_time" in p for p in payloads) == 1
    listed = _runs_in_group(store, group)
    assert [r["run"] for r in listed["runs"]] == [run]
    assert listed["runs"][0]["goodput_percent"] == pytest.approx(goodput)

    calc = Calculator(run, store, clock=clock)
    calc.refresh()
    assert calc.metrics("loss").values.tolist() == pytest.approx([2.0 - k / 10 for k in range(10)])
    assert calc.metrics("loss").steps.tolist() == list(range(10))
    # the workload heartbeat (its first beat at once), the step times when asked
    assert len(calc.metrics("workload_heartbeat").values) >= 1
    if performance:
        def drained():
            flush_all(10)
            c = Calculator(run, store, clock=clock)
            c.refresh()
            return sorted(c.metrics("workload_performance").values.tolist()) == [
                1.0 + k / 1000 for k in range(10)]
        _wait_for(drained)
    else:
        assert len(calc.metrics("workload_performance").values) == 0

    # without the launcher, MaxText's own workload monitor stops the job here
    from google.auth.exceptions import DefaultCredentialsError
    from maxtext.common.gcp_workload_monitor import GCPWorkloadMonitor

    with pytest.raises(DefaultCredentialsError):
        GCPWorkloadMonitor(run)


# ------------------------------------------------------ the fork helpers
from goodput_integrations import maxtext as mt  # noqa: E402
from goodput_integrations.maxtext import config as mt_config  # noqa: E402
from goodput_integrations.maxtext import fork, runtime  # noqa: E402


def _monitor(config, body=None):
    with mt.maybe_monitor_goodput(config) as handle:
        assert handle.wait(30) is not None
        if body:
            body()


def test_fork_helpers_start_rolling_after_the_cumulative_uploader_and_stop_it_first(
        make_config, uploader_calls, tmp_path, clock):
    config = make_config(enable_rolling_window_goodput=True, rolling_windows_seconds=[60, 120])
    recorder = mt.create_goodput_recorder(config)

    def job():
        mt.record_goodput(recorder, mt.RECORD_JOB_START_TIME)
        for step in range(3):
            with mt.maybe_record_goodput(recorder, mt.GoodputEvent.STEP, step):
                clock.advance(10)
        mt.record_goodput(recorder, mt.RECORD_JOB_END_TIME)
    _monitor(config, job)
    assert uploader_calls == [("start_goodput_uploader",),
                              ("start_rolling_window_goodput_uploader", [60, 120]),
                              ("stop_rolling_window_goodput_uploader",),
                              ("stop_goodput_uploader",)]
    tb = read_scalars(str(tmp_path / "out" / config.run_name / "tensorboard" / "goodput"))
    # the final upload of the last 60 s and 120 s of a 30 s job of three steps
    assert tb["goodput/rolling_60s"][-1][1] == pytest.approx(100.0)
    assert tb["goodput/rolling_120s"][-1][1] == pytest.approx(100.0)
    uploader_calls.clear()
    _monitor(make_config(rolling_windows_seconds=[60]))   # the flag is off: no rolling uploader
    assert [c[0] for c in uploader_calls] == ["start_goodput_uploader", "stop_goodput_uploader"]


def test_fork_helpers_survive_rolling_failures_and_let_training_errors_through(
        make_config, uploader_calls, monkeypatch):
    config = make_config(enable_rolling_window_goodput=True)

    def boom(self, *args):
        raise RuntimeError("rolling boom")

    real_start = compat_monitoring.GoodputMonitor.start_rolling_window_goodput_uploader
    monkeypatch.setattr(compat_monitoring.GoodputMonitor,
                        "start_rolling_window_goodput_uploader", boom)
    ran = []
    _monitor(config, lambda: ran.append(True))         # a failing start is one warning
    assert ran == [True]
    assert [c[0] for c in uploader_calls] == ["start_goodput_uploader", "stop_goodput_uploader"]

    monkeypatch.setattr(compat_monitoring.GoodputMonitor,
                        "start_rolling_window_goodput_uploader", real_start)
    monkeypatch.setattr(compat_monitoring.GoodputMonitor,
                        "stop_rolling_window_goodput_uploader", boom)
    uploader_calls.clear()

    class TrainingError(Exception):
        pass

    def crash():
        raise TrainingError()

    with pytest.raises(TrainingError):                  # a failing stop is one warning;
        _monitor(config, crash)                          # the training's error propagates
    assert uploader_calls[-1] == ("stop_goodput_uploader",)
    assert uploader_calls[0] == ("start_goodput_uploader",)
    assert uploader_calls[1][:2] == ("start_rolling_window_goodput_uploader", [3600, 86400])


@pytest.mark.parametrize("value", [[], "[]", ""])
def test_an_empty_list_of_rolling_windows_is_rejected(make_config, value):
    with pytest.raises(ValueError, match="rolling_windows_seconds"):
        mt.read_settings(make_config(rolling_windows_seconds=value))
    assert mt.read_settings(make_config(rolling_windows_seconds="[60, 60, 3600]")
                            ).rolling_windows_seconds == (60, 3600)
    assert mt_config.merge_windows((3600, 60), (60, 7200)) == (3600, 60, 7200)


def test_fork_mldiagnostics_modules_join_the_goodput_run(make_config, clock, tmp_path,
                                                        monkeypatch):
    store = f"sqlite:///{tmp_path / 'fork.sqlite'}"
    monkeypatch.setenv("GOODPUT_STORE", store)
    config = make_config(goodput_store=store)
    recorder = mt.create_goodput_recorder(config)
    recorder.record_job_start_time()
    mldiag, stub = fork.mldiagnostics_modules()
    assert stub is False
    run = mldiag.machinelearning_run(name=config.run_name, run_group="fork-group",
                                     configs={"steps": 10}, gcs_path=str(tmp_path / "mld"),
                                     on_demand_xprof=False, region=None, clock=clock)
    assert run.name == config.run_name                 # not the SDK's <name>-<timestamp>
    mldiag.metrics.record("loss", 1.5, step=3)
    clock.advance(10)
    recorder.record_job_end_time()
    mld.end_run()
    assert flush_all(10)
    payloads = [to_payload(e) for e in open_store(store).read(config.run_name)[0]]
    assert sum("job_start_time" in p for p in payloads) == 1   # the compat added none
    assert sum("job_end_time" in p for p in payloads) == 1
    assert [r["run"] for r in _runs_in_group(store, "fork-group")["runs"]] == [config.run_name]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_fork_helpers_route_the_workload_monitor_to_the_run(make_config, clock, tmp_path,
                                                           monkeypatch, no_google_credentials):
    import queue

    write_fake_maxtext(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    try:
        from maxtext.common.gcp_workload_monitor import GCPWorkloadMonitor
        from google.auth.exceptions import DefaultCredentialsError

        with pytest.raises(DefaultCredentialsError):   # MaxText's own: no credentials
            GCPWorkloadMonitor("x")
        config = make_config(report_performance_metric_for_gcp_monitoring=True)
        recorder = mt.create_goodput_recorder(config)  # arms the patch, as MaxText calls it
        monitor = GCPWorkloadMonitor(config.run_name)
        steps = queue.Queue()
        monitor.start_performance_reporting_thread(steps)
        with pytest.raises(RuntimeError, match="already started"):
            monitor.start_performance_reporting_thread(steps)
        for k in range(3):
            steps.put(0.5 + k)
        monitor.start_heartbeat_reporting_thread(5)

        def stored():
            recorder.flush(10)
            calc = Calculator(config.run_name, config.goodput_store, clock=clock)
            calc.refresh()
            return (sorted(calc.metrics("workload_performance").values.tolist()) == [
                0.5, 1.5, 2.5] and len(calc.metrics("workload_heartbeat").values) == 1)
        _wait_for(stored)
        monitor.__del__()
        runtime.release()                                # the patch goes with the rest
        with pytest.raises(DefaultCredentialsError):
            GCPWorkloadMonitor("x")
    finally:
        for name in [n for n in sys.modules if n == "maxtext" or n.startswith("maxtext.")]:
            del sys.modules[name]


def test_goodput_system_metrics_samples_into_the_run_off_the_training_thread(make_config,
                                                                            clock):
    config = make_config(goodput_system_metrics="true")
    recorder = mt.create_goodput_recorder(config)
    sampler = runtime._system_metrics
    assert sampler is not None and sampler.recorder is recorder
    assert sampler.thread is not threading.current_thread()
    assert sampler.interval_s == 10.0
    runtime.release()                  # stops it (the launcher's end, the tests' fixture)
    assert runtime._system_metrics is None and not sampler.running
    mt.create_goodput_recorder(make_config())
    assert runtime._system_metrics is None   # opt-in only


def test_the_mldiagnostics_alias_serves_our_compat_and_goes_away(store_url, clock,
                                                                 monkeypatch):
    import importlib

    from goodput_core.compat.mldiagnostics.custom_types import metric_types as ours
    from goodput_integrations.maxtext import alias

    alias.enable_reference_alias(store=store_url, clock=clock, mldiagnostics=True)
    import google_cloud_mldiagnostics as mldiag
    from google_cloud_mldiagnostics.custom_types import metric_types

    assert metric_types is ours and mldiag.metric_types is mld.metric_types
    assert mldiag.xprof is mld.xprof and mldiag.metrics is mld.metrics
    with pytest.raises(ModuleNotFoundError, match="not provided by goodput's alias"):
        importlib.import_module("google_cloud_mldiagnostics.utils.gpu_utils")
    run = mldiag.machinelearning_run(name="no-goodput-recorder")   # the SDK's own naming
    assert run.name.startswith("no-goodput-recorder-") and run.store == store_url
    mld.end_run()
    alias.disable_reference_alias()
    assert not [n for n in sys.modules if n.startswith("google_cloud_mldiagnostics")]
    assert mld.metric_types.__name__ == "goodput_core.compat.mldiagnostics.metric_types"
    # the real SDK imported first: the alias refuses rather than split the run
    monkeypatch.setitem(sys.modules, "google_cloud_mldiagnostics",
                        importlib.util.module_from_spec(
                            importlib.machinery.ModuleSpec("google_cloud_mldiagnostics", None)))
    from goodput_integrations.maxtext.alias import AliasConflict

    with pytest.raises(AliasConflict, match="google_cloud_mldiagnostics"):
        alias.enable_reference_alias(store=store_url, mldiagnostics=True)
    alias.enable_reference_alias(store=store_url)   # without it: no conflict
