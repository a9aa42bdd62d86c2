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
