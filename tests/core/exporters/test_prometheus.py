"""Prometheus exporter: scraped over real HTTP on loopback, values checked."""

import urllib.error
import urllib.request
import uuid

import numpy as np
import pytest

pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from goodput_core.timeline.buckets import BadputType  # noqa: E402
from goodput_core.queries.calculator import Calculator  # noqa: E402
from goodput_core.exporters.base import MonitorSnapshot  # noqa: E402
from goodput_core.exporters.prometheus import PrometheusExporter  # noqa: E402
from goodput_core.monitor import Monitor  # noqa: E402
from goodput_core.record.recorder import Recorder  # noqa: E402
from goodput_core.stores.memory import MemoryStore  # noqa: E402
from goodput_core.cli.synthetic import record_synthetic_job  # noqa: E402

T0 = 1_700_000_000.0
# loopback only: never through a proxy from the environment
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _scrape(exporter):
    """{(sample name, frozenset of labels): value} from a real HTTP GET."""
    with _OPENER.open(f"http://127.0.0.1:{exporter.port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _key(name, **labels):
    return name, frozenset(labels.items())


@pytest.fixture
def exporter():
    e = PrometheusExporter(0)
    yield e
    e.close()


def test_scraped_values_match_the_calculator(exporter):
    store = MemoryStore(uuid.uuid4().hex)
    rec = Recorder("syn", store, clock=lambda: T0)
    played = record_synthetic_job(rec, T0)
    assert rec.close(30)
    now = played["end"] + 5

    class Rec:
        def stats(self):
            return {"dropped": 3}

    m = Monitor("syn", store, [exporter], rolling_windows=(60, 3600), clock=lambda: now,
                recorder=Rec())
    m.run_once()
    got = _scrape(exporter)
    calc = Calculator("syn", store)
    calc.refresh()
    r = calc.cumulative(now)
    run = {"run": "syn"}
    assert got[_key("goodput_ratio", **run)] == pytest.approx(r.goodput / 100)
    assert 0 < got[_key("goodput_ratio", **run)] < 1
    assert got[_key("goodput_productive_seconds", **run)] == pytest.approx(r.productive_seconds)
    assert got[_key("goodput_total_seconds", **run)] == pytest.approx(r.total_seconds)
    assert got[_key("goodput_disruptions", **run)] == r.disruptions == 1
    assert got[_key("goodput_max_productive_step", **run)] == r.max_productive_step
    badput = {dict(labels)["bucket"]: v for (name, labels), v in got.items()
              if name == "goodput_badput_seconds"}
    want = {b.name: v for b, v in r.badput_seconds.items()
            if b not in (BadputType.DATA_LOADING_ASYNC, BadputType.CUSTOM_BADPUT_EVENTS)}
    want["CUSTOM_BADPUT_EVENTS.EVAL"] = r.custom_badput_seconds["EVAL"]
    assert badput == pytest.approx(want)
    # the buckets partition the non-productive time
    assert sum(badput.values()) == pytest.approx(r.total_seconds - r.productive_seconds)
    stats = calc.step_stats()
    for q in (0.5, 0.9, 0.99):
        value = got[_key("goodput_step_time_seconds", quantile=str(q), **run)]
        # the monitor's quantile sketch: within its accuracy (0.5 %) of the
        # step time of rank floor(q * (n - 1))
        assert value == pytest.approx(float(np.quantile(stats.step_times, q, method="lower")),
                                      rel=0.005)
    assert got[_key("goodput_ideal_step_time_seconds", **run)] == pytest.approx(
        stats.ideal_step_time)
    for size, w in zip((60, 3600), calc.rolling([60, 3600], now)):
        assert got[_key("goodput_window_ratio", window=f"{size}s", **run)] == pytest.approx(
            w.goodput / 100)
    assert got[_key("goodput_recorder_dropped_events_total", **run)] == 3
    m.stop(10)


def test_parts_keep_their_last_values_and_runs_are_separate(exporter):
    store = MemoryStore(uuid.uuid4().hex)
    rec = Recorder("a", store, clock=lambda: T0)
    played = record_synthetic_job(rec, T0)
    assert rec.close(30)
    Monitor("a", store, [exporter], clock=lambda: played["end"]).run_once()
    # a step-deviation-only snapshot of another run does not erase run "a"
    exporter.export(MonitorSnapshot("b", T0))
    got = _scrape(exporter)
    assert _key("goodput_ratio", run="a") in got
    assert _key("goodput_ratio", run="b") not in got


def test_binds_loopback_by_default_and_picks_a_free_port(exporter):
    assert exporter.port > 0 and exporter.addr == "127.0.0.1"
    assert exporter._server.socket.getsockname()[0] == "127.0.0.1"
    assert exporter.url == f"http://127.0.0.1:{exporter.port}/metrics"
    other = PrometheusExporter(0)
    try:
        assert other.port != exporter.port
        # private registries: nothing of the process-wide default registry leaks in
        assert not any(name.startswith("python_gc") for name, _ in _scrape(other))
    finally:
        other.close()


def test_close_shuts_the_server_down():
    e = PrometheusExporter(0)
    url = e.url
    e.close()
    e.close()  # idempotent
    with pytest.raises(urllib.error.URLError):
        _OPENER.open(url, timeout=5)


@pytest.mark.parametrize("port", [9431, -1, 70000, "80", True])
def test_bad_ports_are_refused(port):
    with pytest.raises(ValueError):
        PrometheusExporter(port)
