"""Off Google Cloud no exporter probes the GCE metadata server unless asked (issue 11 §4)."""

from __future__ import annotations

import logging
import uuid

from goodput_core import Recorder
from goodput_core.queries.calculator import Calculator
from goodput_core.compat import goodput_utils
from goodput_core.compat.goodput_utils import GCPOptions
from goodput_core.compat.monitoring import GoodputMonitor
from goodput_core.exporters.base import MonitorSnapshot
from goodput_core.exporters.cloud_monitoring import CloudMonitoringExporter
from goodput_core.cli.synthetic import record_synthetic_job
from tests.support.fake_cloud_monitoring import FakeMetadataServer
from tests.support.metadata_probe import METADATA_HOST, off_google_cloud, on_google_cloud_vm

START = 1_700_000_000.0


def _snapshot(run="p9-run"):
    store = f"memory://p9-{uuid.uuid4().hex}"
    rec = Recorder(run, store, clock=lambda: START)
    end = record_synthetic_job(rec, START)["end"]
    assert rec.flush(10)
    calc = Calculator(run, store, clock=lambda: end)
    calc.refresh()
    return MonitorSnapshot(run, end, calc.cumulative(), {}, None), store, end


def test_a_plain_machine_expects_no_metadata_server(monkeypatch, tmp_path):
    off_google_cloud(monkeypatch, tmp_path)
    assert goodput_utils.metadata_server_expected() is False
    monkeypatch.setenv(goodput_utils.METADATA_HOST_ENV, "127.0.0.1:9")
    assert goodput_utils.metadata_server_expected() is True


def test_a_google_cloud_vm_expects_one(monkeypatch, tmp_path):
    off_google_cloud(monkeypatch, tmp_path)
    on_google_cloud_vm(monkeypatch, tmp_path)
    assert goodput_utils.metadata_server_expected() is True


def test_default_options_off_google_cloud_probe_nothing(monkeypatch, tmp_path, caplog):
    spy = off_google_cloud(monkeypatch, tmp_path)
    snapshot, _, _ = _snapshot()
    exporter = CloudMonitoringExporter("p9-run", GCPOptions())  # both families on (default)
    with caplog.at_level(logging.WARNING):
        exporter.export(snapshot)
        exporter.export(snapshot)
    assert spy.metadata_probes == []
    assert [r.getMessage() for r in caplog.records if "disabled" in r.getMessage()] == [
        "Cloud Monitoring export disabled for run 'p9-run': not on Google Cloud, so no "
        "metadata lookups (set GCPOptions.project_id and location, or GCE_METADATA_HOST)"]


def test_a_google_cloud_vm_still_looks_its_project_up(monkeypatch, tmp_path):
    spy = off_google_cloud(monkeypatch, tmp_path)
    on_google_cloud_vm(monkeypatch, tmp_path)
    snapshot, _, _ = _snapshot()
    CloudMonitoringExporter("p9-run", GCPOptions()).export(snapshot)
    assert spy.metadata_probes and spy.metadata_probes[0][0] == METADATA_HOST  # refused by the spy


def test_an_explicit_metadata_host_is_asked(monkeypatch, tmp_path):
    spy = off_google_cloud(monkeypatch, tmp_path)
    snapshot, _, _ = _snapshot()
    with FakeMetadataServer({"project/project-id": "p"}) as server:
        monkeypatch.setenv(goodput_utils.METADATA_HOST_ENV, server.host)
        CloudMonitoringExporter("p9-run", GCPOptions()).export(snapshot)
        assert server.requests
    assert spy.metadata_probes == []


def test_compat_monitor_with_reference_defaults_off_google_cloud(monkeypatch, tmp_path):
    spy = off_google_cloud(monkeypatch, tmp_path)
    _, store, end = _snapshot()
    m = GoodputMonitor("p9-run", "log", str(tmp_path / "tb"), 30, monitoring_enabled=True,
                       store=store, clock=lambda: end)  # gcp_options: the reference's defaults
    m.start_goodput_uploader()
    m.stop_goodput_uploader()  # a final upload through every exporter
    assert spy.metadata_probes == []
