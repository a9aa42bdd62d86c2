"""docs/quality.md P9 on the AXLearn path: the engine and the monitors are built
on threads of their own; the training thread only records."""

from __future__ import annotations

import logging
import threading

import pytest

from goodput_core import open_store
from goodput_core.compat import goodput as compat_goodput
from goodput_core.compat import monitoring as compat_monitoring
from goodput_core.events import to_payload
from goodput_integrations import axlearn as gax
from tests.support.blocked_init import block_constructor
from tests.support.metadata_probe import off_google_cloud
from tests.support.tfevents import read_scalars

Event = gax.Event


@pytest.fixture(autouse=True)
def hooks(monkeypatch, clock):
    monkeypatch.setattr(gax.GoodputSuiteRecorder, "_hook_clock", clock)
    monkeypatch.setattr(gax.GoodputSuiteRecorder, "_hook_process_index", 0)


def test_first_events_return_while_the_engine_is_being_built(monkeypatch, flags, clock,
                                                             run_name, store_url):
    gate = block_constructor(monkeypatch, compat_goodput, "GoodputRecorder")
    rec = gax.initialize(flags(enable_monitoring="false"))
    rec.record(Event.START_JOB)          # 1000 s
    clock.advance(2)
    rec.record(Event.START_ACCELERATOR_INIT)  # 1002 s
    assert gate.opening.wait(10) and not gate.release.is_set()
    assert gate.threads and gate.threads[0] != threading.get_ident()
    gate.release.set()
    clock.advance(3)
    rec.record(Event.END_ACCELERATOR_INIT)  # 1005 s, after the engine exists or not
    rec.record(Event.END_JOB)
    assert rec.flush(10)
    payloads = [to_payload(e) for e in open_store(store_url).read(run_name)[0]]
    # buffered events keep the time they were recorded at, in order
    assert [(k, v) for p in payloads for k, v in p.items() if k.endswith("_time")] == [
        ("job_start_time", 1000.0), ("tpu_init_start_time", 1002.0),
        ("tpu_init_end_time", 1005.0), ("job_end_time", 1005.0)]


def test_maybe_monitor_all_returns_while_the_monitor_is_being_built(monkeypatch, flags,
                                                                    clock, tmp_path):
    gate = block_constructor(monkeypatch, compat_monitoring, "GoodputMonitor")
    rec = gax.initialize(flags())
    ran = []
    with rec.maybe_monitor_all():
        # inside the block while the monitor's construction is still blocked
        assert gate.opening.wait(10) and not gate.release.is_set()
        assert gate.threads[0] != threading.get_ident()
        ran.append(True)
        rec.record(Event.START_JOB)
        clock.advance(4)
        rec.record(Event.END_JOB)
        gate.release.set()
    assert ran
    # the stop waited for the start, then made the final upload
    assert "goodput/goodput" in read_scalars(str(tmp_path / "summaries" / "goodput"))


def test_a_monitor_that_cannot_be_built_is_logged_and_training_goes_on(flags, clock,
                                                                       tmp_path, caplog):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the upload directory should be")
    rec = gax.initialize(flags(upload_dir=str(blocker / "summaries")))
    with caplog.at_level(logging.WARNING, logger="goodput"):
        with rec.maybe_monitor_all():
            rec.record(Event.START_JOB)
            clock.advance(1)
            rec.record(Event.END_JOB)
    assert rec.flush(10)
    assert any("monitor-start" in r.getMessage() and "failed" in r.getMessage()
               for r in caplog.records)


def test_default_spec_off_google_cloud_never_probes_the_metadata_server(monkeypatch, flags,
                                                                        clock, tmp_path):
    spy = off_google_cloud(monkeypatch, tmp_path)
    # AXLearn's defaults: both Google Cloud Monitoring families on
    rec = gax.initialize(flags(enable_gcp_goodput_metrics=None,
                               enable_gcp_step_deviation_metrics=None,
                               include_step_deviation="true"))
    assert rec.spec.enable_gcp_goodput_metrics and rec.spec.enable_gcp_step_deviation_metrics
    with rec.maybe_monitor_all():
        rec.record(Event.START_JOB)
        clock.advance(2)
        rec.record(Event.END_JOB)
    assert "goodput/goodput" in read_scalars(str(tmp_path / "summaries" / "goodput"))
    assert spy.metadata_probes == []
