"""The opt-in alias and the launcher: unmodified MaxText-style code on our engine."""

from __future__ import annotations

import importlib
import sys
import textwrap
import types
import uuid

import pytest

from goodput_core import flush_all, open_store
from goodput_core.timeline.buckets import BadputType
from goodput_core.queries.calculator import Calculator
from goodput_core.compat import goodput as compat_goodput
from goodput_core.compat import monitoring as compat_monitoring
from goodput_core.events import to_payload
from goodput_integrations.maxtext import alias, launch
from tests.support.tfevents import read_scalars

pytestmark = pytest.mark.usefixtures("clean_reference")


def test_alias_serves_our_classes_and_goes_away(store_url, clock):
    alias.enable_reference_alias(store=store_url, clock=clock)
    from ml_goodput_measurement import goodput, monitoring  # noqa: F401  (MaxText's import)
    import ml_goodput_measurement.goodput_elastic as goodput_elastic
    import ml_goodput_measurement.src.goodput as src_goodput

    assert issubclass(goodput.GoodputRecorder, compat_goodput.GoodputRecorder)
    assert issubclass(monitoring.GoodputMonitor, compat_monitoring.GoodputMonitor)
    assert src_goodput is goodput  # the real package's two spellings: one module
    assert goodput_elastic.GoodputRecorder is goodput.GoodputRecorder
    assert goodput._JOB_START_TIME == "job_start_time"  # de-facto names are kept
    assert monitoring.GCPOptions is compat_monitoring.GCPOptions
    # the alias's store and clock are the defaults of the classes it serves
    rec = goodput.GoodputRecorder("run-a", "goodput_run-a", True)
    rec.record_job_start_time()
    clock.advance(5)
    rec.record_job_end_time()
    assert rec.flush(10)
    calc = goodput.GoodputCalculator("run-a", "goodput_run-a")
    assert calc.get_job_goodput()[0] == 0.0
    assert calc.get_job_goodput_details()["total_elapsed_time"] == pytest.approx(5.0)
    with pytest.raises(ModuleNotFoundError, match="not provided by goodput's alias"):
        importlib.import_module("ml_goodput_measurement.src.gcp_metrics")

    assert alias.disable_reference_alias() is True
    assert alias.disable_reference_alias() is False
    assert not any(n.startswith("ml_goodput_measurement") for n in sys.modules)
    real = importlib.import_module("ml_goodput_measurement")  # the reference is back
    assert not getattr(real, alias.MARKER, False)


def test_alias_refuses_when_the_reference_is_already_imported(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_goodput_measurement",
                        types.ModuleType("ml_goodput_measurement"))
    with pytest.raises(alias.AliasConflict, match="already imported"):
        alias.enable_reference_alias()
    assert alias.active_session() is None


def test_alias_is_idempotent_for_the_same_settings_only(store_url):
    alias.enable_reference_alias(store=store_url)
    alias.enable_reference_alias(store=store_url)
    with pytest.raises(alias.AliasConflict, match="other settings"):
        alias.enable_reference_alias(store="memory://other")
    with alias.reference_alias(store=store_url):  # already on: left on afterwards
        pass
    assert alias.active_session().store == store_url


def test_monitor_defaults_add_rolling_windows_and_prometheus(tmp_path, store_url, clock,
                                                              monkeypatch):
    seen = {}
    real_start = compat_monitoring.GoodputMonitor.start_rolling_window_goodput_uploader

    def spy(self, windows):
        seen["windows"] = windows
        return real_start(self, windows)

    monkeypatch.setattr(compat_monitoring.GoodputMonitor,
                        "start_rolling_window_goodput_uploader", spy)
    with alias.reference_alias(store=store_url, clock=clock, rolling_windows=(60,)):
        from ml_goodput_measurement import monitoring

        mon = monitoring.GoodputMonitor("run-m", "goodput_run-m", str(tmp_path), 30,
                                        monitoring_enabled=True,
                                        gcp_options=monitoring.GCPOptions(
                                            enable_gcp_goodput_metrics=False,
                                            enable_gcp_step_deviation_metrics=False))
        mon.start_goodput_uploader()
        mon.stop_goodput_uploader()
    assert seen == {"windows": [60]}
    with alias.reference_alias(store=store_url, prometheus_port=9100, ideal_step_time=0.5):
        assert alias._session.defaults("monitor") == {"store": store_url,
                                                      "prometheus_port": 9100,
                                                      "configured_ideal_step_time": 0.5}
        assert alias._session.defaults("recorder") == {"store": store_url}


# An unmodified MaxText-style train script: it only knows ml_goodput_measurement
# and Orbax, reads MaxText's flags from its command line, and advances the
# test's fake clock (reached through the alias settings) instead of working.
FAKE_MAXTEXT = textwrap.dedent('''
    import os, sys
    import numpy as np
    import orbax.checkpoint as ocp
    from ml_goodput_measurement import goodput, monitoring
    from goodput_integrations.maxtext import alias

    clock = alias.active_session().clock
    config = dict(a.split("=", 1) for a in sys.argv[2:])
    truthy = lambda k, d="false": config.get(k, d).lower() == "true"
    run_name = config["run_name"]
    tensorboard_dir = os.path.join(config["base_output_directory"], run_name, "tensorboard", "")

    def create_goodput_recorder():
        if truthy("enable_goodput_recording"):
            return goodput.GoodputRecorder(run_name, f"goodput_{run_name}", True)

    def main():
        recorder = create_goodput_recorder()
        monitor = monitoring.GoodputMonitor(
            job_name=run_name, logger_name=f"goodput_{run_name}",
            tensorboard_dir=tensorboard_dir, upload_interval=30, monitoring_enabled=True,
            pathway_enabled=False, include_badput_breakdown=True,
            include_step_deviation=True, step_deviation_interval_seconds=30,
            gcp_options=monitoring.GCPOptions(enable_gcp_goodput_metrics=False,
                                              enable_gcp_step_deviation_metrics=False))
        monitor.start_goodput_uploader()
        try:
            recorder.record_job_start_time()
            recorder.record_tpu_init_start_time(); clock.advance(10)
            recorder.record_tpu_init_end_time()
            recorder.record_training_preparation_start_time()
            manager = ocp.CheckpointManager(
                os.path.join(config["base_output_directory"], "ckpt"),
                options=ocp.CheckpointManagerOptions(max_to_keep=1), logger=None)
            clock.advance(20)
            recorder.record_training_preparation_end_time()
            for step in range(6):
                recorder.record_step_start_time(step); clock.advance(5)
                if step == 3:
                    manager.save(step, args=ocp.args.StandardSave({"w": np.ones(4)}))
            manager.wait_until_finished()
            manager.close()
            recorder.record_job_end_time()
        finally:
            monitor.stop_goodput_uploader()

    if __name__ == "__main__":
        main()
''')


def test_launcher_runs_unmodified_maxtext(tmp_path, store_url, clock):
    pytest.importorskip("orbax.checkpoint")
    script = tmp_path / "train.py"
    script.write_text(FAKE_MAXTEXT)
    run_name = f"launched-{uuid.uuid4().hex[:6]}"
    out = tmp_path / "out"
    import orbax.checkpoint as ocp

    original_init = ocp.CheckpointManager.__init__
    code = launch.main([f"--goodput-store={store_url}", "--goodput-rolling-windows", "3600",
                        "--", "python3", str(script), "configs/base.yml",
                        f"run_name={run_name}", f"base_output_directory={out}",
                        "enable_goodput_recording=true", "monitor_goodput=true"], clock=clock)
    assert code == 0
    assert alias.active_session() is None  # undone after the run
    assert ocp.CheckpointManager.__init__ is original_init  # the Orbax patch too
    assert flush_all(10)

    payloads = [to_payload(e) for e in open_store(store_url).read(run_name)[0]]
    saves = [p for p in payloads if p.get("event_type") == "save"]
    assert len(saves) == 1 and saves[0]["step"] == 3 and saves[0]["job_name"] == run_name
    calc = Calculator(run_name, store_url, clock=clock)
    calc.refresh()
    r = calc.cumulative()
    # Orbax times its save with the real clock, far after this fake-clock job:
    # it lies outside every step span, so the simulated numbers stand.
    assert r.total_seconds == pytest.approx(60.0, abs=1e-9)
    assert r.productive_seconds == pytest.approx(30.0, abs=1e-9)
    assert r.badput_seconds[BadputType.TPU_INITIALIZATION] == pytest.approx(10.0, abs=1e-9)
    assert r.badput_seconds[BadputType.TRAINING_PREP] == pytest.approx(20.0, abs=1e-9)
    tb = out / run_name / "tensorboard" / "goodput"
    scalars = read_scalars(str(tb))
    assert scalars["goodput/goodput"][-1][1] == pytest.approx(50.0, rel=1e-6)
    assert scalars["goodput/rolling_3600s"][-1][1] == pytest.approx(50.0, rel=1e-6)


@pytest.mark.parametrize("argv, message", [
    ([], "no command"),
    (["--goodput-store"], "needs a value"),
    (["--goodput-bogus=1", "train.py"], "unknown option"),
    (["--goodput-prometheus-port=9431", "train.py"], "9431"),
    (["--goodput-rolling-windows=0", "train.py"], "positive"),
])
def test_launcher_usage_errors(argv, message, capsys):
    assert launch.main(argv) == 2
    assert message in capsys.readouterr().err


def test_launcher_argument_split(monkeypatch):
    monkeypatch.delenv("GOODPUT_STORE", raising=False)
    options, command = launch.parse_args(
        ["--goodput-store", "sqlite:///x.sqlite", "--goodput-no-checkpoint-stats",
         "python", "-m", "maxtext.trainers.pre_train.train", "base.yml",
         "--goodput-store=not-ours"])
    assert options == {"store": "sqlite:///x.sqlite", "checkpoint_stats": False,
                       "rolling_windows": (), "prometheus_port": None, "ideal_step_time": None,
                       "run_group": "", "system_metrics": False}
    assert command == ["-m", "maxtext.trainers.pre_train.train", "base.yml",
                       "--goodput-store=not-ours"]


def test_launcher_options_come_from_the_environment_unless_given(monkeypatch):
    monkeypatch.setenv("GOODPUT_STORE", "sqlite:///env.sqlite")
    monkeypatch.setenv("GOODPUT_ROLLING_WINDOWS", "60,3600")
    monkeypatch.setenv("GOODPUT_PROMETHEUS_PORT", "9100")
    monkeypatch.setenv("GOODPUT_IDEAL_STEP_TIME", "0.5")
    monkeypatch.setenv("GOODPUT_CHECKPOINT_STATS", "false")
    monkeypatch.setenv("GOODPUT_RUN_GROUP", "sweep-1")
    monkeypatch.setenv("GOODPUT_SYSTEM_METRICS", "true")
    options, _ = launch.parse_args(["--goodput-prometheus-port=9200",
                                    "--goodput-checkpoint-stats", "true", "train.py"])
    assert options == {"store": "sqlite:///env.sqlite", "rolling_windows": (60, 3600),
                       "prometheus_port": 9200, "ideal_step_time": 0.5,
                       "checkpoint_stats": True, "run_group": "sweep-1",
                       "system_metrics": True}
    monkeypatch.setenv("GOODPUT_IDEAL_STEP_TIME", "fast")
    with pytest.raises(launch.UsageError, match="GOODPUT_IDEAL_STEP_TIME=fast"):
        launch.parse_args(["train.py"])


def test_orbax_patch_adds_our_logger_in_front_and_is_undone(tmp_path, store_url, clock):
    ocp = pytest.importorskip("orbax.checkpoint")
    from orbax.checkpoint.logging import StandardLogger

    from goodput_integrations.orbax.logger import GoodputLogger

    original_init = ocp.CheckpointManager.__init__
    alias.enable_reference_alias(store=store_url, clock=clock, checkpoint_stats=True)
    from ml_goodput_measurement import goodput

    rec = goodput.GoodputRecorder("run-o", "goodput_run-o", True)  # statistics go here
    theirs = StandardLogger()
    managers = [
        ocp.CheckpointManager(tmp_path / "a"),                      # no logger given
        ocp.CheckpointManager(tmp_path / "b", logger=theirs),       # MaxText's CloudLogger
        ocp.CheckpointManager(tmp_path / "c", None, None, None, None, None, theirs),
    ]
    loggers = [m._logger for m in managers]
    assert all(isinstance(lg, GoodputLogger) for lg in loggers)
    assert isinstance(loggers[0].forward_to[0], StandardLogger)
    assert loggers[1].forward_to == (theirs,) and loggers[2].forward_to == (theirs,)
    loggers[1].log_entry({"event_type": "restore", "step": 2, "directory": "d",
                          "checkpoint_manager_start_time": clock.t,
                          "checkpoint_manager_duration_secs": 1.0})
    assert rec.flush(10)
    (event,) = open_store(store_url).read("run-o")[0]
    assert to_payload(event)["event_type"] == "restore"
    for m in managers:
        m.close()
    alias.disable_reference_alias()
    assert ocp.CheckpointManager.__init__ is original_init
    plain = ocp.CheckpointManager(tmp_path / "d")
    assert not isinstance(plain._logger, GoodputLogger)
    plain.close()


def test_launcher_runs_a_module_with_dash_m(tmp_path, monkeypatch, store_url):
    (tmp_path / "fake_maxtext_train.py").write_text(textwrap.dedent('''
        import sys
        from ml_goodput_measurement import goodput
        RESULT = (sys.argv[1:], goodput.GoodputRecorder.__mro__[1].__module__)
        sys.modules["fake_maxtext_result"] = RESULT
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fake_maxtext_result", raising=False)
    assert launch.main([f"--goodput-store={store_url}", "--goodput-no-checkpoint-stats",
                        "-m", "fake_maxtext_train", "base.yml", "run_name=x"]) == 0
    args, module = sys.modules.pop("fake_maxtext_result")
    assert args == ["base.yml", "run_name=x"]
    assert module == "goodput_core.compat.goodput"
