"""Program goodput (MFU), ML productivity goodput and model metrics next to
goodput: the monitor's snapshot, TensorBoard (read back), Prometheus (scraped
over HTTP on loopback) and ``goodput report`` (text and JSON).

The run is :mod:`tests.support.diagnostic_run`'s; its docstring derives the
expected numbers by hand, and the Calculator is the cross-check.
"""

from __future__ import annotations

import json
import threading
import urllib.request
import uuid

import pytest

pytest.importorskip("tensorboardX")
pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from goodput_core.queries.calculator import Calculator  # noqa: E402
from goodput_core.cli import main  # noqa: E402
from goodput_core.queries.diagnostics import MetricPoint  # noqa: E402
from goodput_core.exporters.base import Exporter  # noqa: E402
from goodput_core.exporters.console import format_snapshot  # noqa: E402
from goodput_core.exporters.prometheus import PrometheusExporter  # noqa: E402
from goodput_core.exporters.tensorboard import TensorBoardExporter  # noqa: E402
from goodput_core.monitor import Monitor  # noqa: E402
from goodput_core.record.recorder import Recorder  # noqa: E402
from goodput_core.stores.memory import MemoryStore  # noqa: E402
from tests.support.diagnostic_run import QUERY, T0, TRUTH, record_diagnostic_run  # noqa: E402
from tests.support.fake_deadlines import FakeDeadlines, Parking, monitor_settled  # noqa: E402
from tests.support.tfevents import read_scalars  # noqa: E402

RUN = "prog-run"
F32 = dict(rel=1e-6, abs=1e-6)  # TensorBoard's simple_value is a float32
GUARD_S = 30.0
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only


class Collect(Exporter):
    name = "collect"

    def __init__(self):
        self.snapshots = []
        self.exported = threading.Semaphore(0)  # one release per export

    def export(self, snapshot):
        self.snapshots.append(snapshot)
        self.exported.release()


class Blocking(Exporter):
    """Blocks in its first export until released (a stuck exporter)."""

    name = "blocking"

    def __init__(self):
        self.parking = Parking()
        self.release = self.parking.release
        self.snapshots = []

    def export(self, snapshot):
        self.snapshots.append(snapshot)
        if len(self.snapshots) == 1:
            self.parking.block()


def _recorded(store=None, **parts):
    store = store if store is not None else MemoryStore(uuid.uuid4().hex)
    rec = Recorder(RUN, store, clock=lambda: T0, strict=True)
    record_diagnostic_run(rec, **parts)
    assert rec.close(GUARD_S)
    return store


def _scrape(prom):
    with _OPENER.open(prom.url, timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


# ---------------------------------------------------------------- snapshot
def test_snapshot_has_program_goodput_and_new_metric_points():
    store = _recorded()
    snap = Monitor(RUN, store, [], clock=lambda: QUERY).run_once()
    prog = snap.program_goodput
    assert prog.mfu == pytest.approx(TRUTH["mfu"])
    assert prog.ml_productivity_goodput == pytest.approx(TRUTH["ml_productivity"])
    assert prog.steps_per_second == pytest.approx(TRUTH["steps_per_second"])
    assert prog.productive_steps == TRUTH["productive_steps"]
    calc = Calculator(RUN, store)
    calc.refresh()
    assert prog == calc.program_goodput(QUERY)
    assert snap.new_metric_points == {
        "loss": [MetricPoint(*p) for p in TRUTH["loss"]],
        "lr": [MetricPoint(*p) for p in TRUTH["lr"]]}
    assert snap.metrics == {"loss": MetricPoint(*TRUTH["loss"][-1]),
                            "lr": MetricPoint(*TRUTH["lr"][-1])}
    line = format_snapshot(snap)
    assert "mfu=50.00%" in line and f"ml_productivity={100 * 10 / 26:.2f}%" in line


def test_program_goodput_needs_the_metadata_and_parts_can_be_switched_off():
    bare = Monitor(RUN, _recorded(metadata=False), [], clock=lambda: QUERY).run_once()
    assert bare.program_goodput is None and bare.cumulative.goodput > 0
    off = Monitor(RUN, _recorded(), [], clock=lambda: QUERY, include_program_goodput=False,
                  include_metrics=False).run_once()
    assert off.program_goodput is None
    assert off.metrics == {} and off.new_metric_points == {}
    # metrics and program goodput come with the goodput part only
    out = Collect()
    steps_only = Monitor(RUN, _recorded(), [out], clock=lambda: QUERY, include_goodput=False)
    assert steps_only.flush(parts={"step_deviation"})
    snap, = out.snapshots
    assert snap.step_stats is not None and snap.program_goodput is None
    assert snap.new_metric_points == {}
    assert steps_only.run_once().new_metric_points == {}  # the enabled parts: steps only
    # the points were not consumed: the goodput part hands them all out later
    assert steps_only.flush(parts={"goodput"})
    assert sum(len(p) for p in out.snapshots[-1].new_metric_points.values()) == 12


def test_a_failing_extra_is_reported_and_goodput_still_goes_out():
    class Broken(Calculator):
        def program_goodput(self, *args, **kwargs):
            raise RuntimeError("bad metadata handling")

    calc = Broken(RUN, _recorded(), clock=lambda: QUERY)
    m = Monitor(RUN, exporters=[], calculator=calc, clock=lambda: QUERY)
    snap = m.run_once()
    assert snap.cumulative.goodput > 0 and snap.program_goodput is None
    assert len(snap.new_metric_points["loss"]) == 10  # the later extras still ran
    assert m.stats()["errors"] == {"program goodput: RuntimeError": 1}


def test_metric_points_are_handed_out_once_and_late_ones_still_arrive():
    store = _recorded()
    clock = [QUERY]
    m = Monitor(RUN, store, [], clock=lambda: clock[0])
    first = m.run_once()
    assert sum(len(p) for p in first.new_metric_points.values()) == 12
    assert m.run_once().new_metric_points == {}  # nothing new
    rec = Recorder(RUN, store, clock=lambda: T0, strict=True)
    rec.record_metric("loss", 0.5, step=10, time=QUERY + 1)
    rec.record_metric("loss", 99.0, step=3, time=T0 + 7.5)  # late: from a slow host
    rec.record_metric("loss", 99.0, step=3, time=T0 + 7.5)  # an exact copy: dropped
    assert rec.close(GUARD_S)
    clock[0] = QUERY + 2
    snap = m.run_once()
    assert snap.new_metric_points == {"loss": [MetricPoint(3, T0 + 7.5, 99.0),
                                               MetricPoint(10, QUERY + 1, 0.5)]}
    # the latest value is the newest point in time, not the last to arrive
    assert snap.metrics["loss"] == MetricPoint(10, QUERY + 1, 0.5)
    assert snap.metrics["lr"] == MetricPoint(*TRUTH["lr"][-1])


def test_a_stuck_exporter_gets_the_metric_points_it_missed():
    store = MemoryStore(uuid.uuid4().hex)
    rec = Recorder(RUN, store, clock=lambda: T0, strict=True)
    rec.record_job_start_time(T0)
    rec.record_metric("loss", 3.0, step=0, time=T0 + 1)
    assert rec.flush(GUARD_S)
    slow, good = Blocking(), Collect()
    deadlines = FakeDeadlines()  # the export timeout is reached without waiting for it
    m = Monitor(RUN, store, [slow, good], clock=lambda: T0 + 10, deadlines=deadlines)
    deadlines.settled = monitor_settled(m, slow.parking)
    try:
        m.run_once()  # slow blocks on point 0
        assert deadlines.expired == [10.0]  # the default export_timeout_s
        assert good.exported.acquire(timeout=GUARD_S)
        rec.record_metric("loss", 2.0, step=1, time=T0 + 2)
        assert rec.flush(GUARD_S)
        m.run_once()  # slow is busy: point 1 is kept for it
        assert good.exported.acquire(timeout=GUARD_S)
        slow.release.set()
        assert m.wait_idle(GUARD_S)
        rec.record_metric("loss", 1.0, step=2, time=T0 + 3)
        assert rec.flush(GUARD_S)
        m.run_once()
        assert m.wait_idle(GUARD_S)
    finally:
        slow.release.set()
    assert [[p.step for p in s.new_metric_points.get("loss", [])] for s in slow.snapshots] == [
        [0], [1, 2]]
    assert [[p.step for p in s.new_metric_points.get("loss", [])] for s in good.snapshots] == [
        [0], [1], [2]]
    assert m.stats()["errors"]["exporter blocking: busy"] == 1
    rec.close()
    assert m.stop(5.0)


# --------------------------------------------------------------- exporters
def test_tensorboard_writes_program_goodput_and_each_metric_point_once(tmp_path):
    store = _recorded()
    clock = [QUERY]
    m = Monitor(RUN, store, [TensorBoardExporter(str(tmp_path))], clock=lambda: clock[0])
    m.run_once()
    clock[0] += 30
    m.run_once()  # nothing new: no metric point written again
    scalars = read_scalars(str(tmp_path / "goodput"))
    step = TRUTH["max_step"]
    assert [(s, v) for s, v, _ in scalars["goodput/program_goodput"]] == [
        (step, pytest.approx(100 * TRUTH["mfu"], **F32))] * 2
    assert [(s, v) for s, v, _ in scalars["goodput/ml_productivity_goodput"]] == [
        (step, pytest.approx(100 * TRUTH["ml_productivity"], **F32))] * 2
    # each point at its own step and wall time; a point without a step at step 0
    assert scalars["metrics/loss"] == [
        (k, pytest.approx(v, **F32), pytest.approx(t)) for k, t, v in TRUTH["loss"]]
    assert scalars["metrics/lr"] == [
        (0, pytest.approx(v, **F32), pytest.approx(t)) for _, t, v in TRUTH["lr"]]
    calc = Calculator(RUN, store)
    calc.refresh()
    assert [v for _, v, _ in scalars["metrics/loss"]] == pytest.approx(
        calc.metrics("loss").values.tolist(), **F32)
    assert m.stop(10)


def test_tensorboard_without_metadata_writes_no_program_goodput(tmp_path):
    store = _recorded(metadata=False, metrics=False)
    Monitor(RUN, store, [TensorBoardExporter(str(tmp_path))], clock=lambda: QUERY).run_once()
    tags = set(read_scalars(str(tmp_path / "goodput")))
    assert "goodput/goodput" in tags
    assert not {t for t in tags if t.startswith(("metrics/", "goodput/program",
                                                 "goodput/ml_productivity"))}


def test_prometheus_serves_program_goodput_and_the_latest_metrics():
    prom = PrometheusExporter(0)
    try:
        Monitor(RUN, _recorded(), [prom], clock=lambda: QUERY).run_once()
        got = _scrape(prom)
        # a run without metadata: no program gauges for it, the other run keeps its own
        Monitor("bare", _recorded(metadata=False, metrics=False), [prom],
                clock=lambda: QUERY).run_once()
        both = _scrape(prom)
    finally:
        prom.close()
    run = frozenset({"run": RUN}.items())
    assert got[("goodput_program_ratio", run)] == pytest.approx(TRUTH["mfu"])
    assert got[("goodput_ml_productivity_ratio", run)] == pytest.approx(
        TRUTH["ml_productivity"])
    metric = {dict(k[1])["name"]: v for k, v in got.items() if k[0] == "goodput_metric"}
    assert metric == {"loss": TRUTH["loss"][-1][2], "lr": TRUTH["lr"][-1][2]}
    assert ("goodput_program_ratio", frozenset({"run": "bare"}.items())) not in both
    assert both[("goodput_program_ratio", run)] == pytest.approx(TRUTH["mfu"])


# ------------------------------------------------------------------ report
@pytest.fixture
def sqlite_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'goodput.sqlite'}"
    _recorded(url)
    rec = Recorder("plain", url, clock=lambda: T0, strict=True)
    rec.record_job_start_time(T0)
    rec.record_step_start_time(0, T0)
    rec.record_job_end_time(T0 + 5)
    assert rec.close(GUARD_S)
    return url


def _report(capsys, store, run, *extra):
    assert main(["report", run, "--store", store, *extra]) == 0
    return capsys.readouterr().out


def test_report_json_has_program_goodput_slice_efficiency_and_metrics(capsys, sqlite_store):
    rep = json.loads(_report(capsys, sqlite_store, RUN, "--json"))
    assert rep["goodput_percent"] == pytest.approx(100 * 20 / 26)
    prog = rep["program_goodput"]
    assert prog["mfu"] == pytest.approx(TRUTH["mfu"])
    assert prog["runtime_goodput"] == pytest.approx(20 / 26)
    assert prog["ml_productivity_goodput"] == pytest.approx(TRUTH["ml_productivity"])
    assert prog["productive_steps"] == 10 and prog["num_devices"] == 2
    assert prog["flops_per_step"] == 2e12 and prog["peak_flops_per_device"] == 1e12
    eff = rep["slice_efficiency"]
    assert (eff["stepping"], eff["available"], eff["seconds"]) == pytest.approx(
        (TRUTH["stepping"], TRUTH["available"], TRUTH["total"]))
    assert rep["metrics"] == {
        "loss": {"step": 9, "time": pytest.approx(T0 + 25), "time_iso": "2023-11-14T22:13:45Z",
                 "value": 1.0},
        "lr": {"step": None, "time": pytest.approx(T0 + 20.5),
               "time_iso": rep["metrics"]["lr"]["time_iso"], "value": 0.05}}
    # a window: slice efficiency over [6, 26] (4·1 + 6·0.5 + 10·1) / 20; program
    # goodput stays the whole run's
    win = json.loads(_report(capsys, sqlite_store, RUN, "--json", "--window", "20s"))
    assert win["slice_efficiency"]["stepping"] == pytest.approx(17 / 20)
    assert win["slice_efficiency"]["available"] == pytest.approx(18.5 / 20)
    assert win["program_goodput"] == prog


def test_report_json_without_diagnostics_has_nulls(capsys, sqlite_store):
    rep = json.loads(_report(capsys, sqlite_store, "plain", "--json"))
    assert rep["program_goodput"] is None and rep["slice_efficiency"] is None
    assert rep["metrics"] == {}
    text = _report(capsys, sqlite_store, "plain")
    assert "Program goodput" not in text and "Slice efficiency" not in text


def test_report_table_shows_them(capsys, sqlite_store):
    text = _report(capsys, sqlite_store, RUN)
    assert "Program goodput (whole run)" in text
    assert f"runtime goodput          {100 * 20 / 26:.2f} %" in text
    assert "program goodput (MFU)    50.00 %" in text
    assert f"ML productivity goodput  {100 * 10 / 26:.2f} %" in text
    assert f"stepping                 {100 * TRUTH['stepping']:.2f} %" in text
    assert f"available                {100 * TRUTH['available']:.2f} %" in text
    assert "loss" in text and "(step 9)" in text and "0.05" in text
