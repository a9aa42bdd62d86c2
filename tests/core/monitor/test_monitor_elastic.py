"""Slice efficiency through the monitor and every exporter, and the compat
elastic monitor and calculator that now publish it.

The run is :mod:`tests.support.diagnostic_run`'s (its docstring derives every
expected number by hand); the Calculator is the cross-check. TensorBoard
files are read back, Prometheus is scraped over HTTP on loopback, Cloud
Monitoring is a real gRPC server on loopback.
"""

from __future__ import annotations

import sys
import types
import urllib.request
import uuid

import pytest

pytest.importorskip("tensorboardX")
pytest.importorskip("prometheus_client")

from google.auth.credentials import AnonymousCredentials  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from goodput_core.timeline.buckets import BadputType  # noqa: E402
from goodput_core.queries.calculator import Calculator  # noqa: E402
from goodput_core.compat import goodput_utils  # noqa: E402
from goodput_core.compat.goodput_elastic import ElasticGoodputCalculator  # noqa: E402
from goodput_core.compat.goodput_utils import GCPOptions  # noqa: E402
from goodput_core.compat.monitoring_elastic import ElasticGoodputMonitor  # noqa: E402
from goodput_core.exporters.base import Exporter  # noqa: E402
from goodput_core.exporters.cloud_monitoring import CloudMonitoringExporter  # noqa: E402
from goodput_core.exporters.prometheus import PrometheusExporter  # noqa: E402
from goodput_core.exporters.tensorboard import TensorBoardExporter  # noqa: E402
from goodput_core.monitor import Monitor  # noqa: E402
from goodput_core.record.recorder import Recorder  # noqa: E402
from goodput_core.stores.memory import MemoryStore  # noqa: E402
from tests.support.diagnostic_run import QUERY, T0, TRUTH, record_diagnostic_run  # noqa: E402
from tests.support.fake_cloud_monitoring import (  # noqa: E402
    FakeCloudMonitoring,
    FakeMetadataServer,
)
from tests.support.tfevents import read_scalars  # noqa: E402

RUN = "elastic-run"
W = TRUTH["window"]
F32 = dict(rel=1e-6, abs=1e-6)  # TensorBoard's simple_value is a float32
GCM_MODULE = "goodput_core.exporters.cloud_monitoring"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only


class Collect(Exporter):
    name = "collect"

    def __init__(self):
        self.snapshots = []

    def export(self, snapshot):
        self.snapshots.append(snapshot)


@pytest.fixture(autouse=True)
def metadata(monkeypatch):
    """GCE metadata lookups can only reach a loopback server (none are expected)."""
    with FakeMetadataServer({}) as server:
        monkeypatch.setenv(goodput_utils.METADATA_HOST_ENV, server.host)
        yield server


@pytest.fixture
def store():
    s = MemoryStore(uuid.uuid4().hex)
    rec = Recorder(RUN, s, clock=lambda: T0, strict=True)
    record_diagnostic_run(rec)
    assert rec.close(30)
    return s


def _calc(store):
    calc = Calculator(RUN, store, clock=lambda: QUERY)
    calc.refresh()
    return calc


def _options():
    return GCPOptions(project_id="proj", location="us-east5-a", acc_type="TPU-v5p",
                      enable_gcp_goodput_metrics=True, enable_gcp_step_deviation_metrics=False)


def _gcm_received(fake):
    """{(short metric, frozenset(labels)): value} of every series received."""
    out = {}
    prefix = "compute.googleapis.com/workload/"  # a literal: not the exporter's constant
    for ts in fake.series():
        assert ts.metric.type.startswith(prefix), ts.metric.type
        kind = ts.points[0].value.WhichOneof("value")
        out[(ts.metric.type[len(prefix):], frozenset(ts.metric.labels.items()))] = \
            getattr(ts.points[0].value, kind)
    return out


def _efficiency_series(received):
    return {k: v for k, v in received.items() if k[0].endswith("_slice_efficiency")}


def _labels(window_type, size):
    return frozenset({"accelerator_type": "TPU-v5p", "window_type": window_type,
                      "rolling_window_size": size}.items())


# ---------------------------------------------------------------- snapshot
def test_snapshot_carries_the_hand_computed_slice_efficiency(store):
    out = Collect()
    snap = Monitor(RUN, store, [out], rolling_windows=(W, 3600), clock=lambda: QUERY).run_once()
    r = snap.cumulative
    assert (r.productive_seconds, r.total_seconds) == (TRUTH["productive"], TRUTH["total"])
    assert r.badput_seconds[BadputType.ELASTIC_SLICE_DOWN] == TRUTH["slice_down"]
    assert r.badput_seconds[BadputType.ELASTIC_REINITIALIZATION] == TRUTH["reinit"]
    eff = snap.slice_efficiency
    assert (eff.stepping, eff.available, eff.seconds) == pytest.approx(
        (TRUTH["stepping"], TRUTH["available"], TRUTH["total"]))
    win = snap.rolling_slice_efficiency[W]
    assert (win.stepping, win.available, win.seconds) == pytest.approx(
        (TRUTH["window_stepping"], TRUTH["window_available"], TRUTH["window_seconds"]))
    # the whole run fits in the hour window: the cumulative figures
    assert snap.rolling_slice_efficiency[3600].stepping == pytest.approx(TRUTH["stepping"])
    calc = _calc(store)
    assert eff == calc.slice_efficiency()
    assert win == calc.slice_efficiency(TRUTH["end"] - W, TRUTH["end"])  # where it ended


def test_slice_efficiency_can_be_switched_off(store):
    snap = Monitor(RUN, store, [], rolling_windows=(W,), clock=lambda: QUERY,
                   include_slice_efficiency=False).run_once()
    assert snap.slice_efficiency is None and snap.rolling_slice_efficiency == {}
    assert snap.cumulative.goodput > 0


def test_windows_without_a_slice_count_in_force_are_left_out():
    # slice counts are first recorded 8 s into the job (time before counts as 0)
    s = MemoryStore(uuid.uuid4().hex)
    rec = Recorder(RUN, s, clock=lambda: T0, strict=True)
    rec.record_job_start_time(T0)
    for k in range(7):
        rec.record_step_start_time(k, T0 + 2 * k)
    rec.record_elastic_slice_counts(4, 4, 4, T0 + 8)
    assert rec.close(30)
    clock = [T0 + 8]
    m = Monitor(RUN, s, [], rolling_windows=(5,), clock=lambda: clock[0])
    snap = m.run_once()  # [0, 8] and [3, 8]: the first count is not before their end
    assert snap.slice_efficiency is None and snap.rolling_slice_efficiency == {}
    clock[0] = T0 + 12
    snap = m.run_once()
    # [0, 12]: 0 until 8, then 4/4 → 4/12; [7, 12]: 4 of 5 s at 1.0 → 0.8
    assert snap.slice_efficiency.stepping == pytest.approx(4 / 12)
    assert snap.rolling_slice_efficiency[5].stepping == pytest.approx(0.8)


def test_runs_without_slice_counts_have_no_efficiency():
    s = MemoryStore(uuid.uuid4().hex)
    rec = Recorder(RUN, s, clock=lambda: T0, strict=True)
    record_diagnostic_run(rec, slices=False)
    assert rec.close(30)
    snap = Monitor(RUN, s, [], rolling_windows=(W,), clock=lambda: QUERY).run_once()
    assert snap.slice_efficiency is None and snap.rolling_slice_efficiency == {}


# --------------------------------------------------------------- exporters
def test_tensorboard_writes_the_efficiency_in_percent(store, tmp_path):
    m = Monitor(RUN, store, [TensorBoardExporter(str(tmp_path))], rolling_windows=(W,),
                clock=lambda: QUERY)
    m.run_once()
    scalars = read_scalars(str(tmp_path / "goodput"))
    step = TRUTH["max_step"]

    def values(tag):
        return [(s, v) for s, v, _ in scalars[tag]]

    assert values("elastic/stepping_slice_efficiency") == [
        (step, pytest.approx(100 * TRUTH["stepping"], **F32))]
    assert values("elastic/available_slice_efficiency") == [
        (step, pytest.approx(100 * TRUTH["available"], **F32))]
    assert values(f"elastic/rolling_{W}s/stepping_slice_efficiency") == [
        (step, pytest.approx(100 * TRUTH["window_stepping"], **F32))]
    assert values(f"elastic/rolling_{W}s/available_slice_efficiency") == [
        (step, pytest.approx(100 * TRUTH["window_available"], **F32))]
    assert m.stop(10)


def test_prometheus_serves_the_efficiency_as_fractions(store):
    prom = PrometheusExporter(0)
    try:
        Monitor(RUN, store, [prom], rolling_windows=(W,), clock=lambda: QUERY).run_once()
        with _OPENER.open(prom.url, timeout=10) as resp:
            text = resp.read().decode()
    finally:
        prom.close()
    got = {(s.name, frozenset(s.labels.items())): s.value
           for fam in text_string_to_metric_families(text) for s in fam.samples
           if s.name == "goodput_slice_efficiency"}

    def key(kind, window):
        return "goodput_slice_efficiency", frozenset(
            {"run": RUN, "kind": kind, "window": window}.items())

    assert got == pytest.approx({
        key("stepping", "cumulative"): TRUTH["stepping"],
        key("available", "cumulative"): TRUTH["available"],
        key("stepping", f"{W}s"): TRUTH["window_stepping"],
        key("available", f"{W}s"): TRUTH["window_available"],
    })


def test_cloud_monitoring_sends_the_elastic_series_with_the_reference_labels(store):
    with FakeCloudMonitoring() as fake:
        gcm = CloudMonitoringExporter(RUN, _options(), client_options={
            "api_endpoint": fake.endpoint}, credentials=AnonymousCredentials(),
            clock=lambda: QUERY)
        Monitor(RUN, store, [gcm], rolling_windows=(W,), clock=lambda: QUERY).run_once()
        gcm.close()
        assert fake.violations == []
        received = _gcm_received(fake)
    assert _efficiency_series(received) == pytest.approx({
        ("stepping_slice_efficiency", _labels("CUMULATIVE", "0")): TRUTH["stepping"],
        ("available_slice_efficiency", _labels("CUMULATIVE", "0")): TRUTH["available"],
        ("stepping_slice_efficiency", _labels("INTERVAL", str(W))): TRUTH["window_stepping"],
        ("available_slice_efficiency", _labels("INTERVAL", str(W))): TRUTH["window_available"],
    })
    # only the metric types of the spec's table: nothing invented for MFU or metrics
    assert {name for name, _ in received} <= {
        "goodput_time", "badput_time", "disruptions", "max_productive_steps",
        "total_elapsed_time", "interval_goodput", "interval_badput",
        "stepping_slice_efficiency", "available_slice_efficiency"}


# ------------------------------------------------------------------ compat
def _compat_gcm(monkeypatch, fake):
    """The compat monitor's Cloud Monitoring exporter, pointed at ``fake``."""
    def factory(run, options, **kwargs):
        return CloudMonitoringExporter(run, options, client_options={
            "api_endpoint": fake.endpoint}, credentials=AnonymousCredentials(),
            clock=lambda: QUERY, **kwargs)

    monkeypatch.setitem(sys.modules, GCM_MODULE,
                        types.SimpleNamespace(CloudMonitoringExporter=factory))


@pytest.mark.parametrize("include", [True, False])
def test_compat_elastic_monitor_publishes_slice_efficiency_when_asked(
        store, tmp_path, monkeypatch, include):
    with FakeCloudMonitoring() as fake:
        _compat_gcm(monkeypatch, fake)
        m = ElasticGoodputMonitor(RUN, "log", str(tmp_path), 30, monitoring_enabled=True,
                                  include_slice_efficiency=include, gcp_options=_options(),
                                  store=store, clock=lambda: QUERY)
        m.start_rolling_window_goodput_uploader([W])
        m.stop_rolling_window_goodput_uploader()  # final upload: the interval series
        m.stop_goodput_uploader()                 # final upload: the cumulative series
        assert fake.violations == []
        received = _efficiency_series(_gcm_received(fake))
    tags = read_scalars(str(tmp_path / "goodput"))
    elastic_tags = {t for t in tags if t.startswith("elastic/")}
    if not include:  # the reference sends nothing then; neither do we
        assert received == {} and elastic_tags == set()
        return
    assert received == pytest.approx({
        ("stepping_slice_efficiency", _labels("CUMULATIVE", "0")): TRUTH["stepping"],
        ("available_slice_efficiency", _labels("CUMULATIVE", "0")): TRUTH["available"],
        ("stepping_slice_efficiency", _labels("INTERVAL", str(W))): TRUTH["window_stepping"],
        ("available_slice_efficiency", _labels("INTERVAL", str(W))): TRUTH["window_available"],
    })
    assert elastic_tags == {"elastic/stepping_slice_efficiency",
                            "elastic/available_slice_efficiency",
                            f"elastic/rolling_{W}s/stepping_slice_efficiency",
                            f"elastic/rolling_{W}s/available_slice_efficiency"}
    assert tags["elastic/stepping_slice_efficiency"][0][1] == pytest.approx(
        100 * TRUTH["stepping"], **F32)


def test_compat_elastic_calculator_uses_the_engine_efficiency(store):
    calc = ElasticGoodputCalculator(RUN, "log", store=store, clock=lambda: QUERY)
    calc.get_job_goodput()
    details = calc.get_job_goodput_details()
    assert details["stepping_slice_efficiency"] == pytest.approx(TRUTH["stepping"])
    assert details["available_slice_efficiency"] == pytest.approx(TRUTH["available"])
    interval = calc.get_interval_metric_details(QUERY - W, QUERY)  # as asked, clipped
    assert interval["stepping_slice_efficiency"] == pytest.approx(TRUTH["interval_stepping"])
    assert interval["available_slice_efficiency"] == pytest.approx(TRUTH["interval_available"])
    # a window that ends before the first slice count: keys left out, as the reference
    early = calc.get_interval_metric_details(T0 - 5, T0)
    assert "stepping_slice_efficiency" not in early


def test_compat_elastic_calculator_leaves_idle_time_out():
    # attempt 1 [0, 10] at 2 of 4 slices; idle 10-20; attempt 2 [20, 30] at 4 of 4:
    # (10·0.5 + 10·1) / 20 = 0.75 (counting the idle gap would give 20/30)
    s = MemoryStore(uuid.uuid4().hex)
    rec = Recorder(RUN, s, clock=lambda: T0, strict=True)
    rec.record_job_start_time(T0)
    rec.record_elastic_slice_counts(2, 4, 2, T0)
    rec.record_step_start_time(0, T0 + 1)
    rec.record_job_end_time(T0 + 10)
    rec.record_job_start_time(T0 + 20)
    rec.record_elastic_slice_counts(4, 4, 4, T0 + 20)
    rec.record_step_start_time(1, T0 + 21)
    rec.record_job_end_time(T0 + 30)
    assert rec.close(30)
    calc = ElasticGoodputCalculator(RUN, "log", store=s, clock=lambda: T0 + 40)
    calc.get_job_goodput()
    details = calc.get_job_goodput_details()
    assert details["stepping_slice_efficiency"] == pytest.approx(0.75)
    assert details["available_slice_efficiency"] == pytest.approx(0.75)
