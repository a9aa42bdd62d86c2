"""``--recorder_spec`` keys: AXLearn's and ours, unknown keys warned, bad values errors."""

from __future__ import annotations

import logging
import os

import pytest

from goodput_integrations import axlearn as gax
from goodput_integrations.axlearn.spec import AXLEARN_KEYS, OUR_KEYS, parse_spec


def test_axlearn_keys_with_axlearn_meanings():
    spec = parse_spec(["name=run", "upload_dir=/out/summaries", "upload_interval=15",
                       "rolling_window_size=86400,604800", "jax_backend=proxy",
                       "enable_monitoring=True"])
    assert spec.name == "run"
    assert spec.logger_name == "goodput_logger_run"
    assert spec.upload_interval == 15
    assert spec.rolling_window_size == (86400, 604800)
    assert spec.pathways is True
    assert spec.enable_monitoring is True
    assert spec.rolling_window_dir == os.path.join("/out/summaries", "rolling_window_run")
    assert set(AXLEARN_KEYS) == {"name", "upload_dir", "upload_interval",
                                 "rolling_window_size", "jax_backend", "enable_monitoring"}


def test_our_keys_and_defaults():
    spec = parse_spec(["name=r", "enable_monitoring=false"])
    assert spec.upload_dir is None and spec.upload_interval == 30
    assert spec.store is None and spec.prometheus_port is None
    assert not spec.include_step_deviation and not spec.end_job_on_crash
    assert spec.enable_gcp_goodput_metrics and spec.enable_gcp_step_deviation_metrics
    spec = parse_spec(["name=r", "upload_dir=/o", "store=sqlite:///tmp/g.sqlite",
                       "prometheus_port=9100", "include_step_deviation=yes",
                       "step_deviation_interval=45", "ideal_step_time=1.25",
                       "enable_gcp_goodput_metrics=0", "enable_gcp_step_deviation_metrics=off",
                       "end_job_on_crash=true", "per_host=true", "eager_monitoring=true",
                       "run_group=sweep"])
    assert spec.store == "sqlite:///tmp/g.sqlite" and spec.prometheus_port == 9100
    assert spec.include_step_deviation and spec.step_deviation_interval == 45
    assert spec.ideal_step_time == 1.25
    assert not spec.enable_gcp_goodput_metrics and not spec.enable_gcp_step_deviation_metrics
    assert spec.end_job_on_crash and spec.per_host and spec.eager_monitoring
    assert spec.run_group == "sweep"
    assert len(OUR_KEYS) == 11


def test_later_key_wins_and_values_may_hold_equals():
    spec = parse_spec(["name=a", "name=b", "enable_monitoring=false",
                       "store=sqlite:///x?mode=rw"])
    assert spec.name == "b" and spec.store == "sqlite:///x?mode=rw"


def test_unknown_keys_are_warned_about_not_dropped_silently(caplog):
    with caplog.at_level(logging.WARNING, logger="goodput"):
        spec = parse_spec(["name=r", "enable_monitoring=false", "uplod_dir=/typo",
                           "colour=blue"])
    assert spec.unknown == (("uplod_dir", "/typo"), ("colour", "blue"))
    (message,) = [r.getMessage() for r in caplog.records if "unknown" in r.getMessage()]
    assert "uplod_dir" in message and "colour" in message and "upload_dir" in message


@pytest.mark.parametrize("items, message", [
    (["upload_dir=/o"], "name=<run name> is required"),
    (["name=r"], "upload_dir=<dir> is required"),
    (["name=r", "upload_dir=/o", "upload_interval=abc"], "upload_interval=abc"),
    (["name=r", "upload_dir=/o", "upload_interval=-1"], "upload_interval=-1"),
    (["name=r", "upload_dir=/o", "rolling_window_size=60,x"], "rolling_window_size"),
    (["name=r", "upload_dir=/o", "enable_monitoring=sometimes"], "true or false"),
    # AXLearn's to_bool takes "true"/"false" only: "1" and "yes" raise there too
    (["name=r", "upload_dir=/o", "enable_monitoring=1"], "true or false"),
    (["name=r", "upload_dir=/o", "enable_monitoring=yes"], "true or false"),
    (["name=r", "upload_dir=/o", "prometheus_port=9431"], "9431"),
    (["name=r", "upload_dir=/o", "prometheus_port=99999"], "prometheus_port"),
    (["name=r", "upload_dir=/o", "store=postgres://db/x?schema=no;such"], "store URL"),
    (["name=r", "upload_dir=/o", "ideal_step_time=-1"], "ideal_step_time"),
    (["name=", "upload_dir=/o"], "non-empty"),
    (["name"], "expected key=value"),
])
def test_bad_values_fail_at_start_up(items, message, flags):
    with pytest.raises(ValueError, match=message):
        parse_spec(items)
    with pytest.raises(ValueError, match=message):
        gax.GoodputSuiteRecorder.from_flags([*items])


def test_a_refused_store_url_does_not_show_its_password():
    with pytest.raises(ValueError, match="store URL") as info:
        parse_spec(["name=r", "upload_dir=/o", "store=postgres://u:Sp3c-pw@db/x"])
    assert "Sp3c-pw" not in str(info.value) and "u:***@db" in str(info.value)


def test_upload_interval_zero_is_accepted_as_axlearn_and_uploads_every_second(tmp_path):
    # AXLearn's from_flags takes int("0"); our monitors then upload every second
    spec = parse_spec(["name=r", f"upload_dir={tmp_path}", "upload_interval=0",
                       "enable_monitoring=TRUE"])
    assert spec.upload_interval == 0 and spec.enable_monitoring is True
    from goodput_integrations.axlearn.monitoring import RunMonitors

    monitor = RunMonitors(spec, clock=lambda: 1000.0)._monitor(str(tmp_path), prometheus=False)
    assert monitor._upload_interval == 1


def test_tiny_flag_parser_reads_axlearn_flag_lists():
    fv = gax.parse_flags(["--trainer_dir=/x", "--recorder_type", "m:n",
                          "--recorder_spec=name=r", "--recorder_spec", "upload_dir=/o",
                          "--other=1"])
    assert fv.recorder_type == "m:n"
    assert fv.recorder_spec == ["name=r", "upload_dir=/o"]
    with pytest.raises(ValueError, match="needs a value"):
        gax.parse_flags(["--recorder_spec"])
    assert gax.initialize(["--trainer_dir=/x"]) is None  # no recorder asked for
    with pytest.raises(NotImplementedError, match="Unknown recorder type"):
        gax.initialize(["--recorder_type=goodput_integrations.axlearn:nope"])


def test_without_tensorboardx_one_clear_warning_at_start(monkeypatch, caplog, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # not installed
    with caplog.at_level(logging.WARNING, logger="goodput"):
        rec = gax.GoodputSuiteRecorder.from_flags(
            ["name=nt", f"upload_dir={tmp_path}", "store=memory://nt-tbx"], process_index=0)
        with rec.maybe_monitor_all():
            rec.record(gax.Event.START_JOB)
            rec.record(gax.Event.END_JOB)
        assert rec.close(30)
    messages = [r.getMessage() for r in caplog.records if r.name == "goodput"]
    (warning,) = [m for m in messages if "tensorboardX" in m]
    assert "goodput-core[axlearn]" in warning and str(tmp_path) in warning
    assert len([m for m in messages if "failed" in m]) == 0  # no traceback from a thread
    assert os.listdir(tmp_path) == []
