"""Insights through the monitor: Prometheus scraped over HTTP, TensorBoard files
read back, the console line."""

from __future__ import annotations

import io
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from goodput_core.events import EventRecord, Kind
from goodput_core.exporters.console import ConsoleExporter
from goodput_core.exporters.prometheus import PrometheusExporter
from goodput_core.exporters.tensorboard import TensorBoardExporter
from goodput_core.monitor import Monitor
from goodput_core.stores.memory import MemoryStore
from tests.support.tfevents import read_scalars


def _host(pi, load, hang=False):
    ev = [EventRecord("ins", int(Kind.JOB_START), 0.0, None, None, pi)]
    for k in range(10):
        ev += [EventRecord("ins", int(Kind.DATA_LOADING_START), k + 1 - load, None, None, pi),
               EventRecord("ins", int(Kind.DATA_LOADING_END), k + 1.0, None, None, pi),
               EventRecord("ins", int(Kind.STEP_START), k + 1.0, k, None, pi)]
    if hang:  # host 0's watchdog: step 9 hung from 11 s (10 + 1 s expected), still open
        ev.append(EventRecord("ins", int(Kind.HANG), 40.0, 9,
                              {"last_progress_time": 10.0, "expected_step_seconds": 1.0,
                               "hang_stack": "thread MainThread:\n  train.py:1 step"}, pi))
    return ev


def _store():
    store = MemoryStore(uuid.uuid4().hex)
    for pi, load in enumerate((0.05, 0.05, 0.5, 0.06)):
        store.append(_host(pi, load, hang=pi == 0))
    return store


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, no proxy


def _scrape(port):
    with _OPENER.open(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_prometheus_publishes_hangs_and_host_outliers():
    prom = PrometheusExporter(0)
    m = Monitor("ins", _store(), [prom], clock=lambda: 100.0)
    snap = m.run_once()
    assert snap.hung and snap.hang_seconds == pytest.approx(89.0)  # 11 s to now (100 s)
    got = _scrape(prom.port)
    assert got[("goodput_hung", (("run", "ins"),))] == 1.0
    assert got[("goodput_hang_seconds", (("run", "ins"),))] == pytest.approx(89.0)
    assert got[("goodput_host_outlier", (("bucket", "DATA_LOADING"), ("process_index", "2"),
                                         ("run", "ins")))] == 1.0
    assert got[("goodput_host_local_seconds", (("process_index", "2"), ("run", "ins")))] \
        == pytest.approx(5.0)
    assert ("goodput_host_local_seconds", (("process_index", "median"), ("run", "ins"))) in got
    m.stop(10)


def test_tensorboard_and_console_show_the_insights(tmp_path):
    out = io.StringIO()
    m = Monitor("ins", _store(), [TensorBoardExporter(str(tmp_path)), ConsoleExporter(out)],
                clock=lambda: 100.0, include_step_deviation=False)
    m.run_once()
    m.stop(10)
    scalars = read_scalars(str(tmp_path / "goodput"))
    assert scalars["insights/hung"][0][1] == 1.0
    assert scalars["insights/hang_seconds"][0][1] == pytest.approx(89.0)
    assert scalars["insights/host_2/host_local_seconds"][0][1] == pytest.approx(5.0)
    line = out.getvalue()
    assert "HUNG hang_seconds=89s" in line and "outlier_hosts=2:DATA_LOADING" in line


# ------------------------------------------------ bounds, metric names, thresholds
def _many_hosts(n=12):
    """Host i loads 0.01 x (i + 1) s before each of 10 steps: host-local time
    10 x 0.01 x (i + 1) = 0.1 x (i + 1) s, so hosts 2..11 are the top 10."""
    store = MemoryStore(uuid.uuid4().hex)
    for pi in range(n):
        store.append(_host(pi, 0.01 * (pi + 1)))
    return store


def test_exporters_publish_the_top_ten_hosts_and_the_median(tmp_path):
    """12 hosts: Prometheus and TensorBoard carry hosts 2..11 (the 10 with the
    most host-local time) and the median (0.65 s: the mean of the 6th and 7th,
    0.6 and 0.7), never hosts 0 and 1. Mutation killed: top(12) or top(9)."""
    prom = PrometheusExporter(0)
    m = Monitor("ins", _many_hosts(), [prom, TensorBoardExporter(str(tmp_path))],
                clock=lambda: 100.0, include_step_deviation=False)
    m.run_once()
    got = _scrape(prom.port)
    m.stop(10)
    hosts = {dict(labels)["process_index"]: v for (name, labels), v in got.items()
             if name == "goodput_host_local_seconds"}
    assert set(hosts) == {str(i) for i in range(2, 12)} | {"median"}
    assert hosts["11"] == pytest.approx(1.2) and hosts["2"] == pytest.approx(0.3)
    assert hosts["median"] == pytest.approx(0.65)
    scalars = read_scalars(str(tmp_path / "goodput"))
    tb = {tag.split("/")[1] for tag in scalars if tag.endswith("/host_local_seconds")}
    assert tb == {f"host_{i}" for i in range(2, 12)} | {"host_median"}


def test_prometheus_publishes_the_checkpoint_interval_now_and_recommended():
    """The run of tests/support/advice_runs.py: M = 984 s, C = 12 s, R = 160 s
    and 100 s of work between saves (derived in queries/test_checkpoint_advice_rules.py).
    ``goodput_checkpoint_interval_seconds{kind="current"}`` = 100 and
    ``{kind="recommended"}`` = the optimum of the model for those inputs.
    Mutation killed: the metric renamed, or the kinds swapped."""
    from goodput_core.queries.checkpoint_advice import best_interval
    from tests.support.advice_runs import two_attempts

    store = MemoryStore(uuid.uuid4().hex)
    store.append(two_attempts().events)
    prom = PrometheusExporter(0)
    m = Monitor("adv", store, [prom], clock=lambda: 984.0, include_step_deviation=False)
    m.run_once()
    got = _scrape(prom.port)
    m.stop(10)
    name = "goodput_checkpoint_interval_seconds"
    assert got[(name, (("kind", "current"), ("run", "adv")))] == pytest.approx(100.0)
    assert got[(name, (("kind", "recommended"), ("run", "adv")))] == pytest.approx(
        best_interval(984.0, 12.0, 160.0))


@pytest.mark.parametrize("gain,shown", [(0.5, True), (0.49, False), (3.0, True)])
def test_the_console_shows_checkpoint_advice_from_half_a_point_of_gain(gain, shown):
    """``checkpoint_every=`` appears when the gain is at least 0.5 points.
    Mutation killed: ``>`` instead of ``>=``, or another threshold."""
    import dataclasses

    from goodput_core.exporters.base import MonitorSnapshot
    from goodput_core.exporters.console import format_snapshot
    from goodput_core.queries.checkpoint_advice import advise

    advice = dataclasses.replace(advise(3600.0, 30.0, 120.0, current=100.0),
                                 goodput_gain_points=gain)
    line = format_snapshot(MonitorSnapshot("r", 0.0, checkpoint_advice=advice))
    assert ("checkpoint_every=" in line) is shown
    if shown:
        assert f"(+{gain:.1f}pt)" in line
