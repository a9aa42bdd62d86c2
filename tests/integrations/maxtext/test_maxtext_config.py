"""MaxText's goodput flags: defaults, naming conventions, our flags, errors."""

from __future__ import annotations

import os
import types

import pytest

from goodput_integrations.maxtext.config import MAXTEXT_DEFAULTS, read_settings


def test_defaults_are_maxtexts_base_yml():
    s = read_settings({"run_name": "r", "base_output_directory": "/out"})
    assert s.enable_goodput_recording is False
    assert s.monitor_goodput is False
    assert s.goodput_upload_interval_seconds == 30
    assert s.enable_pathways_goodput is False
    assert s.monitor_step_time_deviation is True
    assert s.step_deviation_interval_seconds == 30
    assert s.enable_gcp_goodput_metrics is True
    assert s.enable_gcp_step_deviation_metrics is True
    assert s.enable_checkpoint_cloud_logger is False
    assert s.elastic_enabled is False
    assert (s.store, s.rolling_windows, s.prometheus_port, s.ideal_step_time) == (
        None, (), None, None)
    assert set(MAXTEXT_DEFAULTS) >= {
        "enable_goodput_recording", "monitor_goodput", "goodput_upload_interval_seconds",
        "enable_pathways_goodput", "monitor_step_time_deviation",
        "step_deviation_interval_seconds", "enable_gcp_goodput_metrics",
        "enable_gcp_step_deviation_metrics", "enable_checkpoint_cloud_logger",
        "elastic_enabled"}


def test_naming_conventions():
    s = read_settings(types.SimpleNamespace(run_name="llama", base_output_directory="/out"))
    assert s.logger_name == "goodput_llama"
    assert s.tensorboard_dir == os.path.join("/out", "llama", "tensorboard", "")
    # MaxText's own tensorboard_dir wins when the config has one
    s = read_settings({"run_name": "llama", "base_output_directory": "/out",
                       "tensorboard_dir": "/elsewhere/tb/"})
    assert s.tensorboard_dir == "/elsewhere/tb/"


def test_string_values_from_the_command_line_are_parsed():
    s = read_settings({
        "run_name": "r", "base_output_directory": "/o", "enable_goodput_recording": "True",
        "monitor_goodput": "true", "goodput_upload_interval_seconds": "15",
        "monitor_step_time_deviation": "false", "step_deviation_interval_seconds": 45.0,
        "goodput_store": "sqlite:///tmp/x.sqlite", "goodput_rolling_windows": "3600, 86400,3600",
        "goodput_prometheus_port": "9100", "goodput_ideal_step_time": "1.5"})
    assert s.enable_goodput_recording and s.monitor_goodput
    assert s.goodput_upload_interval_seconds == 15
    assert s.monitor_step_time_deviation is False
    assert s.step_deviation_interval_seconds == 45
    assert s.store == "sqlite:///tmp/x.sqlite"
    assert s.rolling_windows == (3600, 86400)
    assert s.prometheus_port == 9100
    assert s.ideal_step_time == 1.5
    # lists are accepted too, and an unset/negative port is off
    s = read_settings({"goodput_rolling_windows": [60, 120], "goodput_prometheus_port": -1})
    assert s.rolling_windows == (60, 120) and s.prometheus_port is None


def test_report_performance_metric_turns_step_deviation_gcm_off():
    s = read_settings({"report_performance_metric_for_gcp_monitoring": True})
    assert s.enable_gcp_step_deviation_metrics is True  # the flag is not rewritten
    assert s.gcp_step_deviation_metrics is False


@pytest.mark.parametrize("flags, message", [
    ({"monitor_goodput": "maybe"}, "monitor_goodput"),
    ({"goodput_upload_interval_seconds": 0}, "goodput_upload_interval_seconds"),
    ({"goodput_upload_interval_seconds": "soon"}, "goodput_upload_interval_seconds"),
    ({"step_deviation_interval_seconds": 1.5}, "step_deviation_interval_seconds"),
    ({"goodput_rolling_windows": "3600,-1"}, "goodput_rolling_windows"),
    ({"goodput_prometheus_port": 9431}, "9431"),
    ({"goodput_prometheus_port": 70000}, "goodput_prometheus_port"),
    ({"goodput_ideal_step_time": "fast"}, "goodput_ideal_step_time"),
    ({"enable_goodput_recording": True, "run_name": ""}, "run_name"),
    ({"monitor_goodput": True, "run_name": "r"}, "base_output_directory"),
    ({"goodput_store": 42}, "goodput_store"),
])
def test_bad_values_are_a_clear_error(flags, message):
    with pytest.raises(ValueError, match=message):
        read_settings(flags)


def test_config_objects_that_raise_on_unknown_keys_are_fine():
    class HyperParameters:  # like MaxText's: __getattr__ raises for unknown keys
        def __init__(self, keys):
            self._keys = keys

        def __getattr__(self, name):
            try:
                return self.__dict__["_keys"][name]
            except KeyError:
                raise AttributeError(name) from None

    s = read_settings(HyperParameters({"run_name": "r", "enable_goodput_recording": True}))
    assert s.enable_goodput_recording and s.run_name == "r"


def test_unknown_goodput_keys_are_warned_about(caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="goodput"):
        read_settings({"run_name": "r", "goodput_stor": "memory://typo",
                       "goodput_store": "memory://ok", "other_key": 1})
    messages = [r.getMessage() for r in caplog.records]
    assert any("goodput_stor " in m and "goodput_store" in m for m in messages)
    assert not any("other_key" in m for m in messages)


def test_our_settings_come_from_the_environment_a_config_key_wins(monkeypatch):
    # MaxText's pyconfig rejects unknown keys: the variables are the way in
    monkeypatch.setenv("GOODPUT_STORE", "sqlite:///from-env.sqlite")
    monkeypatch.setenv("GOODPUT_ROLLING_WINDOWS", "60,3600")
    monkeypatch.setenv("GOODPUT_PROMETHEUS_PORT", "9100")
    monkeypatch.setenv("GOODPUT_IDEAL_STEP_TIME", "0.25")
    monkeypatch.setenv("GOODPUT_CHECKPOINT_STATS", "off")
    s = read_settings({"run_name": "r"})
    assert (s.store, s.rolling_windows, s.prometheus_port, s.ideal_step_time,
            s.checkpoint_stats) == ("sqlite:///from-env.sqlite", (60, 3600), 9100, 0.25, False)
    s = read_settings({"run_name": "r", "goodput_store": "memory://cfg",
                       "goodput_prometheus_port": ""})  # blank: the variable applies
    assert (s.store, s.prometheus_port) == ("memory://cfg", 9100)
    monkeypatch.setenv("GOODPUT_PROMETHEUS_PORT", "9431")
    with pytest.raises(ValueError, match=r"\$GOODPUT_PROMETHEUS_PORT=9431"):
        read_settings({"run_name": "r"})


def test_goodput_job_name_names_the_job_as_maxtext_0_2_5():
    s = read_settings({"run_name": "run-1", "goodput_job_name": "job-a",
                       "base_output_directory": "/o"})
    assert (s.job_name, s.logger_name) == ("job-a", "goodput_job-a")
    assert s.tensorboard_dir == os.path.join("/o", "run-1", "tensorboard", "")  # per run
    assert read_settings({"run_name": "run-1", "goodput_job_name": ""}).job_name == "run-1"
