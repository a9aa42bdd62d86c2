"""Rolling windows of finished runs (semantics.md rules 10 and 15) with real
processes: a run that ended, one that crashed on an exception and one killed
with SIGKILL, none restarted, read ten minutes later. Each run's recorder
clock is injected ten minutes behind the wall clock, so "now" is ten minutes
after the run (no test sleeps on the clock). Every view says the same rolling
figure as ``goodput report --window``: the window that ends where the run
ended, not an empty one ending now (which read 0 %): the console line of
``goodput monitor --once``, Prometheus (scraped over HTTP), TensorBoard (the
files read back), Cloud Monitoring (a real gRPC server on loopback),
OpenTelemetry (an OTLP receiver on loopback) and ``goodput serve``'s series.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("prometheus_client")
pytest.importorskip("tensorboardX")
pytest.importorskip("opentelemetry.sdk")

from google.auth.credentials import AnonymousCredentials  # noqa: E402

from goodput_core import gcp  # noqa: E402
from goodput_core.compat.goodput_utils import GCPOptions  # noqa: E402
from goodput_core.exporters.cloud_monitoring import CloudMonitoringExporter  # noqa: E402
from goodput_core.exporters.console import ConsoleExporter  # noqa: E402
from goodput_core.exporters.otel import OtelExporter  # noqa: E402
from goodput_core.exporters.prometheus import PrometheusExporter  # noqa: E402
from goodput_core.exporters.tensorboard import TensorBoardExporter  # noqa: E402
from goodput_core.monitor import Monitor  # noqa: E402
from goodput_core.queries.calculator import Calculator  # noqa: E402
from tests.support.cli_process import goodput  # noqa: E402
from tests.support.dashboard import dashboard, get_json, run_path  # noqa: E402
from tests.support.fake_cloud_monitoring import (  # noqa: E402
    FakeCloudMonitoring, FakeMetadataServer)
from tests.support.otlp_receivers import HttpReceiver, clear_otel_env, gauge_points  # noqa: E402
from tests.support.prometheus_scrape import scrape  # noqa: E402
from tests.support.tfevents import read_scalars  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BEHIND_S = 600.0  # the runs' clocks are ten minutes behind: read ten minutes later
WINDOW_S = 1  # the last second of each run: steps and an evaluation

_CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from goodput_core import Recorder

    mode, store, behind = sys.argv[1], sys.argv[2], float(sys.argv[3])
    rec = Recorder(mode, store, clock=lambda: time.time() - behind, hang_detection=False)
    with rec.job():
        for k in range(40):
            with rec.step(k):
                time.sleep(0.02)
            if k % 10 == 9:
                with rec.custom_badput_event("eval"):
                    time.sleep(0.06)
            if k == 35 and mode == "crash":
                raise RuntimeError("the job crashed")
            if k == 35 and mode == "kill":
                assert rec.flush(30)
                os.kill(os.getpid(), signal.SIGKILL)
""")


def _record(mode: str, store: str) -> None:
    env = dict(os.environ, GOODPUT_HEARTBEAT_SECONDS="0.5")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", _CHILD, mode, store, str(BEHIND_S)], env=env,
                          capture_output=True, text=True, timeout=120)
    expected = {"ended": 0, "crash": 1, "kill": -9}[mode]
    assert done.returncode == expected, done.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    store = f"sqlite:///{tmp_path_factory.mktemp('finished')}/runs.sqlite"
    for mode in ("ended", "crash", "kill"):
        _record(mode, store)
    return store


def _report_window(store: str, run: str) -> dict:
    done = goodput("report", run, "--store", store, "--window", f"{WINDOW_S}s", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("run, state", [("ended", "ended"), ("crash", "stopped"),
                                        ("kill", "stopped")])
def test_every_view_gives_the_reports_window_of_a_run_read_ten_minutes_later(
        runs, run, state, tmp_path, monkeypatch):
    rep = _report_window(runs, run)
    assert rep["state"]["state"] == state
    want = rep["goodput_percent"]
    # the last second of the run: steps and an evaluation, neither 0 % nor 100 %
    assert 20 < want < 99.9 and rep["window"]["end"] == rep["lifetime"]["end"]
    calc = Calculator(run, runs)
    calc.refresh()
    assert calc.rolling([WINDOW_S])[0].goodput == pytest.approx(want, rel=1e-9)

    # the monitor line of `goodput monitor RUN --once --rolling 1`
    done = goodput("monitor", run, "--store", runs, "--once", "--rolling", str(WINDOW_S))
    assert done.returncode == 0, done.stderr
    assert f"rolling={WINDOW_S}s:{want:.2f}%" in done.stdout

    # every exporter of a monitor, at the wall clock (ten minutes after the run)
    clear_otel_env(monkeypatch)
    console = io.StringIO()
    otlp = HttpReceiver()
    with FakeMetadataServer({}) as meta, FakeCloudMonitoring() as fake:
        monkeypatch.setenv(gcp.METADATA_HOST_ENV, meta.host)
        prom = PrometheusExporter(0)
        gcm = CloudMonitoringExporter(
            run, GCPOptions(project_id="p", location="us-east5-a", acc_type="cpu"),
            client_options={"api_endpoint": fake.endpoint}, credentials=AnonymousCredentials())
        exporters = [ConsoleExporter(console), prom, TensorBoardExporter(str(tmp_path / "tb")),
                     gcm, OtelExporter(otlp.endpoint, protocol="http/protobuf", timeout_s=10)]
        monitor = Monitor(run, runs, exporters, rolling_windows=(WINDOW_S,), process=False)
        try:
            snap = monitor.run_once()
            assert snap.rolling[WINDOW_S].goodput == pytest.approx(want, rel=1e-9)
            got = scrape(f"http://127.0.0.1:{prom.port}/metrics")
            key = frozenset({("run", run), ("window", f"{WINDOW_S}s")})
            assert got[("goodput_window_ratio", key)] == pytest.approx(want / 100, rel=1e-9)
            assert got[("goodput_run_running", frozenset({("run", run)}))] == 0.0
            interval = [ts for ts in fake.series()
                        if ts.metric.type.endswith("/interval_goodput")]
            assert [ts.points[0].value.double_value for ts in interval] == \
                [pytest.approx(want, rel=1e-9)]
            points = gauge_points(otlp.metrics)
            assert points[("goodput.window.ratio", frozenset(
                {"goodput.run": run, "goodput.window": f"{WINDOW_S}s"}.items()))] == \
                pytest.approx(want / 100, rel=1e-9)
        finally:
            monitor.stop(skip_final_flush=True, timeout=30)  # (closes the exporters)
            otlp.close()
    assert f"rolling={WINDOW_S}s:{want:.2f}%" in console.getvalue()
    tb = read_scalars(str(tmp_path / "tb" / "goodput"))
    assert tb[f"goodput/rolling_{WINDOW_S}s"][-1][1] == pytest.approx(want, rel=1e-6)

    # the dashboard's goodput over time with a rolling window: its last point
    with dashboard(runs) as server:
        series = get_json(server.url + f"api/runs/{run_path(run)}/series?window={WINDOW_S}")
    assert series["goodput_percent"][-1] == pytest.approx(want, rel=1e-9)
    assert re.fullmatch(r"ended|stopped", series["state"])


@pytest.mark.parametrize("run, cause", [
    ("crash", "exception:RuntimeError"),
    ("kill", "no sign of life (killed, or the host was lost)")])
def test_a_stop_without_a_restart_is_an_open_incident_where_runs_says_stopped(runs, run, cause):
    state = goodput("runs", "--store", runs, "--state")
    assert state.returncode == 0, state.stderr
    assert any(line.split()[:3] == [run, "stopped", "at"] for line in state.stdout.splitlines())
    done = goodput("incidents", run, "--store", runs, "--json")
    assert done.returncode == 0, done.stderr
    (incident,) = json.loads(done.stdout)["incidents"]
    assert incident["open"] and incident["cause"] == cause and incident["restarted"] is None
    text = goodput("incidents", run, "--store", runs).stdout
    assert "no incidents" not in text and "open: not restarted" in text
    ended = goodput("incidents", "ended", "--store", runs).stdout
    assert "no incidents" in ended
