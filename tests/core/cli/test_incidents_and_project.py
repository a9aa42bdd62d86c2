"""`goodput incidents` and `goodput project` as users run them, and the
lifecycle figures in the report and the Prometheus exporter."""

import json
import subprocess
import sys
import urllib.request
import uuid

import pytest

from goodput_core.queries.calculator import Calculator
from goodput_core.queries.lifecycle import lifecycle
from goodput_core.record.recorder import Recorder
from goodput_core.stores import open_store
from goodput_core.stores.memory import MemoryStore
from tests.core.queries.test_lifecycle import _requeued_job
from tests.core.queries.test_projection import _run


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "goodput_core.cli", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path}/g.sqlite"
    rec = Recorder("req", open_store(url), strict=True, clock=lambda: 0.0)
    _requeued_job(rec)
    assert rec.close(30)
    rec = Recorder("fails", open_store(url), strict=True, clock=lambda: 0.0)
    _run(rec, 3)
    assert rec.close(30)
    return url


def test_goodput_incidents(url):
    p = _cli("incidents", "req", "--store", url, "--json")
    assert p.returncode == 0, p.stderr
    inc = json.loads(p.stdout)
    (i,) = inc["incidents"]
    assert i["cause"] == "preemption" and i["time_to_detect"] == pytest.approx(0.5)
    text = _cli("incidents", "req", "--store", url)
    assert "attempt 1: preemption, seen by process 0" in text.stdout
    assert "MTBF 21.0s, MTTR 15.0s" in text.stdout
    assert _cli("incidents", "nope", "--store", url).returncode == 2


def test_goodput_project(url):
    p = _cli("project", "fails", "--store", url, "--hosts", "16", "--interval", "60",
             "--json", "--simulate")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["available"] and out["hosts_projected"] == 16 and out["interval_seconds"] == 60
    assert abs(out["simulated_projected"] - out["ettr_projected"]) <= 0.02
    assert "exp(" in out["model"]
    text = _cli("project", "fails", "--store", url)
    assert "model ETTR now" in text.stdout and "model:" in text.stdout
    # the model's figure is labelled so, and the run's measured goodput is beside it
    calc = Calculator("fails", url)
    measured = calc.cumulative().goodput
    assert f"measured goodput    {measured:6.2f} %" in text.stdout
    assert out["measured_goodput"] == pytest.approx(measured / 100)
    assert abs(out["ettr_now"] - out["measured_goodput"]) > 0.01  # not the same figure
    none = _cli("project", "req", "--store", url)  # 1 failure, no save interval
    assert none.returncode == 0 and "no projection" in none.stdout
    assert _cli("project", "fails", "--store", url, "--hosts", "0").returncode == 2


def test_the_report_shows_the_lifecycle(url):
    p = _cli("report", "req", "--store", url)
    assert p.returncode == 0, p.stderr
    assert "ETTR                     27.50 %   (= SG x RG)" in p.stdout  # 11 / 40
    assert "scheduling goodput (SG)  52.50 %" in p.stdout  # 21 / 40
    assert "Scheduling:" in p.stdout


def test_prometheus_publishes_sg_ettr_and_incidents():
    pytest.importorskip("prometheus_client")
    from goodput_core.exporters.prometheus import PrometheusExporter
    from goodput_core.monitor import Monitor

    store = MemoryStore(uuid.uuid4().hex)
    rec = Recorder("req", store, strict=True, clock=lambda: 0.0)
    _requeued_job(rec)
    assert rec.flush(30)
    exp = PrometheusExporter(0)
    try:
        Monitor("req", store, [exp], clock=lambda: 50.0).run_once()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        text = opener.open(exp.url, timeout=10).read().decode()
    finally:
        exp.close()
    calc = Calculator("req", store)
    calc.refresh()
    lc = lifecycle(calc, 50.0)
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    assert values['goodput_ettr_ratio{run="req"}'] == pytest.approx(lc.ettr)
    assert values['goodput_scheduling_ratio{run="req"}'] == pytest.approx(lc.scheduling_goodput)
    assert values['goodput_scheduling_seconds{run="req"}'] == pytest.approx(19)
    assert values['goodput_incidents{run="req"}'] == 1
    assert values['goodput_mttr_seconds{run="req"}'] == pytest.approx(15)
