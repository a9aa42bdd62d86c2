"""docs/quality.md P9 on the MaxText helper path: the monitor is built and
started on a thread of its own; entering the block does not wait for it."""

from __future__ import annotations

import logging
import os
import threading

from goodput_core.compat import monitoring as compat_monitoring
from goodput_integrations import maxtext as mt
from tests.support.blocked_init import block_constructor
from tests.support.metadata_probe import off_google_cloud
from tests.support.tfevents import read_scalars


def test_the_block_runs_while_the_monitor_is_being_built(monkeypatch, make_config, clock):
    gate = block_constructor(monkeypatch, compat_monitoring, "GoodputMonitor")
    config = make_config()
    recorder = mt.create_goodput_recorder(config)
    with mt.maybe_monitor_goodput(config) as start:
        assert gate.opening.wait(10) and not gate.release.is_set()
        assert gate.threads[0] != threading.get_ident()
        with mt.maybe_record_goodput(recorder, mt.GoodputEvent.JOB):
            with mt.maybe_record_goodput(recorder, mt.GoodputEvent.STEP, 0):
                clock.advance(3)
        gate.release.set()
        assert isinstance(start.wait(30), compat_monitoring.GoodputMonitor)
    tb = os.path.join(config.base_output_directory, config.run_name, "tensorboard", "goodput")
    assert read_scalars(tb)["goodput/goodput"]  # the final upload after the start finished


def test_a_monitor_that_cannot_be_built_is_logged_and_training_goes_on(make_config, clock,
                                                                       tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the output directory should be")
    config = make_config(base_output_directory=str(blocker))
    recorder = mt.create_goodput_recorder(config)
    with caplog.at_level(logging.WARNING, logger="goodput"):
        with mt.maybe_monitor_goodput(config) as start:
            with mt.maybe_record_goodput(recorder, mt.GoodputEvent.JOB):
                clock.advance(1)
            assert start.wait(30) is None
    assert recorder.flush(10)
    assert any("monitor-start" in r.getMessage() and "failed" in r.getMessage()
               for r in caplog.records)


def test_default_flags_off_google_cloud_never_probe_the_metadata_server(monkeypatch,
                                                                        make_config, clock,
                                                                        tmp_path):
    spy = off_google_cloud(monkeypatch, tmp_path)
    # MaxText's defaults: both Google Cloud Monitoring families on
    config = make_config(enable_gcp_goodput_metrics=True, enable_gcp_step_deviation_metrics=True)
    recorder = mt.create_goodput_recorder(config)
    with mt.maybe_monitor_goodput(config) as start:
        with mt.maybe_record_goodput(recorder, mt.GoodputEvent.JOB):
            with mt.maybe_record_goodput(recorder, mt.GoodputEvent.STEP, 0):
                clock.advance(3)
        assert start.wait(30) is not None
    tb = os.path.join(config.base_output_directory, config.run_name, "tensorboard", "goodput")
    assert read_scalars(tb)["goodput/goodput"]
    assert spy.metadata_probes == []
