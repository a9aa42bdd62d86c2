"""OpenTelemetry metrics: the real OTLP exporters (HTTP/protobuf and gRPC) send to
loopback receivers that decode the wire format; every data point is checked
against the calculator, and a collector that is down, refusing or black-holed
never raises into the caller."""

import subprocess
import sys
import uuid

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")

from goodput_core.cli.synthetic import record_synthetic_job  # noqa: E402
from goodput_core.exporters.latest import window_label  # noqa: E402
from goodput_core.exporters.otel import METRICS, OtelExporter  # noqa: E402
from goodput_core.monitor import Monitor  # noqa: E402
from goodput_core.queries.calculator import Calculator  # noqa: E402
from goodput_core.record.recorder import Recorder  # noqa: E402
from goodput_core.stores.memory import MemoryStore  # noqa: E402
from goodput_core.timeline.buckets import BadputType  # noqa: E402
from tests.support.otlp_receivers import (  # noqa: E402
    GrpcReceiver, HttpReceiver, clear_otel_env, gauge_points, resource_attributes, units)

T0 = 1_700_000_000.0


@pytest.fixture(autouse=True)
def _no_otel_env(monkeypatch):
    """The shell's OpenTelemetry settings never reach these tests."""
    clear_otel_env(monkeypatch)


@pytest.fixture(params=["http/protobuf", "grpc"])
def receiver(request):
    r = HttpReceiver() if request.param == "http/protobuf" else GrpcReceiver()
    r.protocol = request.param
    yield r
    r.close()


@pytest.fixture
def synthetic():
    store = MemoryStore(uuid.uuid4().hex)
    rec = Recorder("syn", store, clock=lambda: T0)
    played = record_synthetic_job(rec, T0)
    assert rec.close(30)
    return store, played


def _point(points, name, **attrs):
    return points[(name, frozenset({"goodput.run": "syn", **attrs}.items()))]


def test_every_data_point_equals_the_calculator(receiver, synthetic):
    store, played = synthetic
    now = played["end"] + 5

    class Rec:
        def stats(self):
            return {"dropped": 3}

    exp = OtelExporter(receiver.endpoint, protocol=receiver.protocol, timeout_s=10)
    m = Monitor("syn", store, [exp], rolling_windows=(60, 3600), clock=lambda: now,
                recorder=Rec())
    m.run_once()
    assert exp.failed_exports == 0 and exp.exports == 1
    assert len(receiver.metrics) == 1
    got = gauge_points(receiver.metrics)
    calc = Calculator("syn", store)
    calc.refresh()
    r = calc.cumulative(now)
    assert _point(got, "goodput.ratio") == pytest.approx(r.goodput / 100)
    assert 0 < _point(got, "goodput.ratio") < 1
    assert _point(got, "goodput.productive.duration") == pytest.approx(r.productive_seconds)
    assert _point(got, "goodput.total.duration") == pytest.approx(r.total_seconds)
    assert _point(got, "goodput.disruptions") == r.disruptions == 1
    assert _point(got, "goodput.step.max_productive") == r.max_productive_step
    badput = {dict(attrs)["goodput.bucket"]: v for (name, attrs), v in got.items()
              if name == "goodput.badput.duration"}
    want = {b.name: v for b, v in r.badput_seconds.items()
            if b not in (BadputType.DATA_LOADING_ASYNC, BadputType.CUSTOM_BADPUT_EVENTS)}
    want["CUSTOM_BADPUT_EVENTS.EVAL"] = r.custom_badput_seconds["EVAL"]
    assert badput == pytest.approx(want)
    # the partition: productive + every bucket sent = total
    assert sum(badput.values()) + _point(got, "goodput.productive.duration") == \
        pytest.approx(r.total_seconds)
    for size, w in zip((60, 3600), calc.rolling((60, 3600), now)):
        assert _point(got, "goodput.window.ratio",
                      **{"goodput.window": window_label(size)}) == pytest.approx(w.goodput / 100)
    stats = calc.step_stats()
    assert _point(got, "goodput.step.ideal_duration") == pytest.approx(stats.ideal_step_time)
    import numpy as np
    for q in (0.5, 0.9, 0.99):  # the monitor's quantile sketch: within 0.5 % of the
        # step time of rank floor(q * (n - 1))
        assert _point(got, "goodput.step.duration", **{"goodput.quantile": repr(q)}) == \
            pytest.approx(float(np.quantile(stats.step_times, q, method="lower")), rel=0.005)
    assert _point(got, "goodput.recorder.dropped_events") == 3
    assert _point(got, "goodput.hang.active") == 0
    assert _point(got, "goodput.hang.duration") == 0
    advice = calc.checkpoint_advice(now)
    if advice.available:
        assert _point(got, "goodput.checkpoint.interval",
                      **{"goodput.interval.kind": "recommended"}) == \
            pytest.approx(advice.recommended_interval_seconds)
    # names and units as documented
    sent_units = units(receiver.metrics)
    for key, (name, unit, _, _) in METRICS.items():
        if name in sent_units:
            assert sent_units[name] == unit, name
    assert {"goodput.ratio", "goodput.badput.duration", "goodput.step.duration"} <= \
        set(sent_units)
    res = resource_attributes(receiver.metrics[0])
    assert res["service.name"] == "goodput"
    assert res["process.pid"] > 0 and res["host.name"]
    m.stop(timeout=10)


def test_configured_by_the_standard_variables(monkeypatch, synthetic):
    """OTEL_EXPORTER_OTLP_ENDPOINT/PROTOCOL/HEADERS, OTEL_RESOURCE_ATTRIBUTES and
    OTEL_SERVICE_NAME configure an exporter built with no arguments."""
    store, played = synthetic
    rec = GrpcReceiver()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rec.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=ml%20infra")
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,host.name=h7")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "trainer")
        exp = OtelExporter()
        Monitor("syn", store, [exp], clock=lambda: played["end"]).run_once()
        assert exp.failed_exports == 0 and len(rec.metrics) == 1
        res = resource_attributes(rec.metrics[0])
        assert res["service.name"] == "trainer"  # the variable wins over ours
        assert res["host.name"] == "h7"
        assert res["deployment.environment"] == "prod"
        assert rec.headers[0]["x-team"] == "ml infra"
        exp.close()
    finally:
        rec.close()


def test_an_unsupported_protocol_is_an_error_at_construction(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="http/json"):
        OtelExporter()
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL")
    with pytest.raises(ValueError, match="timeout"):
        OtelExporter("http://127.0.0.1:1", timeout_s=0)


def _free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_collector_that_is_down_or_refusing_is_counted_not_raised(synthetic, caplog):
    store, played = synthetic
    refusing = HttpReceiver()
    refusing.status = 400  # a permanent refusal: not retried
    try:
        down = OtelExporter(f"http://127.0.0.1:{_free_port()}", timeout_s=0.5)
        refused = OtelExporter(refusing.endpoint, timeout_s=5)
        m = Monitor("syn", store, [down, refused], clock=lambda: played["end"])
        for _ in range(2):
            assert m.run_once() is not None
        for exp in (down, refused):
            assert exp.exports == 2 and exp.failed_exports == 2
            assert exp.dropped_points > 0
        assert refusing.metrics == []
        warnings = [r for r in caplog.records if "did not take the metrics" in r.getMessage()]
        assert len(warnings) == 2  # once per exporter, then only counted
        assert m.stats()["errors"] == {}  # nothing raised into the monitor
        m.stop(timeout=5)
    finally:
        refusing.close()


@pytest.mark.parametrize("kind", ["http/protobuf", "grpc"])
def test_a_black_holed_collector_costs_one_bounded_export(kind, synthetic):
    """The collector accepts and never answers: the export gives up at its
    timeout (0.3 s here), counts the drop and returns."""
    store, played = synthetic
    rec = HttpReceiver() if kind == "http/protobuf" else GrpcReceiver()
    rec.hold = True
    try:
        exp = OtelExporter(rec.endpoint, protocol=kind, timeout_s=0.3)
        m = Monitor("syn", store, [exp], clock=lambda: played["end"], export_timeout_s=30)
        assert m.run_once() is not None
        assert exp.failed_exports == 1
        rec.hold = False
        rec.release.set()
        m.run_once()  # the collector is back: the next export goes through
        assert exp.failed_exports == 1 and exp.exports == 2
        m.stop(timeout=5)
    finally:
        rec.close()


def test_importing_the_engine_and_the_exporters_imports_no_opentelemetry():
    """P6: OpenTelemetry is imported only when an OpenTelemetry exporter is built."""
    code = ("import sys; import goodput_core, goodput_core.monitor, goodput_core.cli, "
            "goodput_core.exporters.otel, goodput_core.exporters.otel_trace, "
            "goodput_core.queries.run_trace;"
            "bad = [m for m in sys.modules if m.startswith('opentelemetry')];"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_monitor_process_sends_the_metrics(receiver, tmp_path):
    # a store the monitor process can read: the exporter is rebuilt there from its settings
    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    rec = Recorder("syn", url, clock=lambda: T0)
    record_synthetic_job(rec, T0)
    assert rec.close(30)
    m = Monitor("syn", url, [OtelExporter(receiver.endpoint, protocol=receiver.protocol,
                                          timeout_s=10)], interval_s=600)
    assert m.in_process
    m.start()
    assert m.stop(60)  # the final cycle, sent from the monitor process
    calc = Calculator("syn", url)
    calc.refresh()
    got = gauge_points(receiver.metrics)
    assert _point(got, "goodput.disruptions") == calc.cumulative().disruptions == 1
    assert OtelExporter(receiver.endpoint, exporter=object()).process_spec() is None
