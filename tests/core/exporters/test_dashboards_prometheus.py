"""The Grafana dashboard and the alert rules shipped for the Prometheus exporter.

Every panel's PromQL is run by a real Prometheus (Debian's, started here on
loopback with a generated config) scraping our exporter while a recorded run
goes on, and must return what the calculator says; the alert rules are
checked with ``promtool test rules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import uuid
from importlib import resources

import numpy as np
import pytest

pytest.importorskip("prometheus_client")

from goodput_core.events import EventRecord, Kind  # noqa: E402
from goodput_core.exporters.prometheus import PrometheusExporter  # noqa: E402
from goodput_core.monitor import Monitor  # noqa: E402
from goodput_core.queries.calculator import Calculator  # noqa: E402
from goodput_core.record.recorder import Recorder  # noqa: E402
from goodput_core.stores import open_store  # noqa: E402
from goodput_core.stores.memory import MemoryStore  # noqa: E402
from goodput_core.cli.synthetic import record_synthetic_job  # noqa: E402
from goodput_core.timeline.buckets import BadputType  # noqa: E402
from tests.support.fake_clock import FakeClock  # noqa: E402
from tests.support.prometheus_server import PrometheusServer, binary_or_skip  # noqa: E402

RUN = 'prom-run "quoted"'
T0 = 1_700_000_000.0
DASHBOARDS = resources.files("goodput_core.exporters").joinpath("dashboards")
_QUANTILES = (0.5, 0.9, 0.99)  # the exporter's default


def _grafana():
    return json.loads(DASHBOARDS.joinpath("grafana-goodput.json").read_text())


def _promql_string(value: str) -> str:
    """``value`` as a PromQL regex matching exactly it (what Grafana puts for $run)."""
    special = set(r"\.^$|?*+()[]{}")
    escaped = "".join("\\" + c if c in special else c for c in value)
    return escaped.replace("\\", "\\\\").replace('"', '\\"')


def _expected(calc: Calculator, now: float):
    """{(panel title, refId): {frozenset(labels): value}} from the calculator."""
    r = calc.cumulative(now)
    end = r.lifetime[1] if calc.state(now).state != "running" else now
    stats = calc.step_stats()
    hangs = calc.hangs(now)
    advice = calc.checkpoint_advice(now)
    hosts = calc.hosts(now)
    run = ("run", RUN)
    one = lambda v, *labels: {frozenset((run,) + labels): v}  # noqa: E731
    bad = {}
    for bucket, pct in r.badput_percent.items():
        if bucket not in (BadputType.DATA_LOADING_ASYNC, BadputType.CUSTOM_BADPUT_EVENTS):
            bad[frozenset((run, ("bucket", bucket.name)))] = pct
    for kind, pct in r.custom_badput_percent.items():
        bad[frozenset((run, ("bucket", f"CUSTOM_BADPUT_EVENTS.{kind}")))] = pct
    # the exporter's step-time quantiles come from the monitor's streaming sketch:
    # within its documented accuracy (0.5 % relative) of the order statistic
    q = np.quantile(stats.step_times, _QUANTILES, method="lower")
    ckpt = {}
    if advice.available:
        if advice.current_interval_seconds is not None:
            ckpt.update(one(advice.current_interval_seconds, ("kind", "current")))
        ckpt.update(one(advice.recommended_interval_seconds, ("kind", "recommended")))
    stopped = hasattr(calc, "state") and calc.state(now).state == "stopped"
    outliers, local = {}, {}
    if len(hosts.hosts) >= 2:
        outliers = {frozenset((run, ("process_index", str(i)), ("bucket", b))): 1.0
                    for i, b, _ in hosts.outliers}
        local = {frozenset((run, ("process_index", str(h.process_index)))): h.host_local_seconds
                 for h in hosts.top(10)}
        local[frozenset((run, ("process_index", "median")))] = hosts.median["host_local_seconds"]
    return {
        ("Goodput", "A"): one(r.goodput),
        ("Goodput over time", "A"): one(r.goodput),
        # a rolling window ends now, or where the run ended (rule 10)
        ("Goodput over time", "B"): one(calc.window(end - 3600, end, now=now).goodput,
                                        ("window", "3600s")),
        ("Badput by bucket (% of total time)", "A"): bad,
        ("Step time", "A"): {frozenset((run, ("quantile", repr(float(k))))): v
                             for k, v in zip(_QUANTILES, q.tolist())},
        ("Step time", "B"): one(stats.ideal_step_time),
        ("Disruptions", "A"): one(float(r.disruptions)),
        ("Hung now", "A"): one(1.0 if any(h.end is None for h in hangs) else 0.0),
        ("Stopped runs", "A"): {frozenset(): 1.0 if stopped else 0.0},
        ("Hang time", "A"): one(float(sum(h.seconds for h in hangs))),
        ("Checkpoint interval: current and recommended", "A"): ckpt,
        ("Host outliers", "A"): outliers,
        ("Host-local time (top hosts and the median host)", "A"): local,
    }


def _recorded_events():
    """The synthetic job (crash, restart) as a real Recorder writes it on four hosts
    (process indices 0-3), host 3 also loading data for 0.9 s inside each of its
    first twelve steps (by hand the host outlier: 10.8 s more host-local time
    than the median host's 8.6 s -- init 5, prep 3, a save 0.5, a load 0.1 --
    more than twice it), plus a hang the watchdog reports after step 12 (open until step
    13 starts)."""
    mem = MemoryStore(uuid.uuid4().hex)
    rec = Recorder(RUN, mem)
    record_synthetic_job(rec, T0)
    assert rec.close(30)
    events = mem.read(RUN)[0]
    # one writer process per host (rule 13: a stream is a host and pid)
    hosts = [e._replace(process_index=p, host=f"h{p}", pid=1000 + p)
             for p in range(4) for e in events]
    starts = sorted((e.time, e.step) for e in events if e.kind == Kind.STEP_START)
    for t, step in starts[:12]:
        hosts += [EventRecord(RUN, int(Kind.DATA_LOADING_START), t + 0.05, step, None,
                              process_index=3, host="h3", pid=1003),
                  EventRecord(RUN, int(Kind.DATA_LOADING_END), t + 0.95, step, None,
                              process_index=3, host="h3", pid=1003)]
    step13 = next(t for t, step in starts if step == 13)
    step12 = next(t for t, step in starts if step == 12)
    hang = EventRecord(RUN, int(Kind.HANG), step13 - 0.1, 12,
                       {"last_progress_time": step12, "expected_step_seconds": 0.5})
    return sorted(hosts + [hang], key=lambda e: e.time), hang.time


def _check_panels(prom: PrometheusServer, calc: Calculator, now: float) -> int:
    expected = _expected(calc, now)
    checked = 0
    for panel in _grafana()["panels"]:
        for target in panel["targets"]:
            want = expected.pop((panel["title"], target["refId"]))
            expr = target["expr"].replace("$run", _promql_string(RUN))
            got = {frozenset((k, v) for k, v in x["metric"].items()
                             if k not in ("__name__", "job", "instance")): x["value"]
                   for x in prom.query(expr)}
            assert got.keys() == want.keys(), (panel["title"], expr, got, want)
            rel = 0.005 if (panel["title"], target["refId"]) == ("Step time", "A") else 1e-9
            for key, value in want.items():
                assert got[key] == pytest.approx(value, rel=rel, abs=1e-9), (panel["title"], key)
            checked += 1
    assert not expected, f"panels missing from the dashboard: {sorted(expected)}"
    return checked


@pytest.mark.timeout(240)
def test_every_grafana_panel_returns_the_calculators_value(tmp_path):
    binary_or_skip("prometheus")
    events, hang_at = _recorded_events()
    url = f"sqlite:///{tmp_path}/prom.sqlite"
    store = open_store(url)
    exporter = PrometheusExporter(0)
    clock = FakeClock(hang_at + 2)
    monitor = Monitor(RUN, url, [exporter], rolling_windows=(3600,), clock=clock)
    prom = PrometheusServer([f"127.0.0.1:{exporter.port}"]).start()
    try:
        # mid-run: up to an open hang in the first attempt
        store.append([e for e in events if e.time <= hang_at])
        monitor.run_once()
        calc = Calculator(RUN, url, clock=clock)
        calc.refresh()
        total = calc.cumulative(clock()).total_seconds
        prom.wait_until("goodput_total_seconds", lambda r: r and r[0]["value"] == total)
        assert prom.query("goodput_hung")[0]["value"] == 1.0  # the hang is open now
        assert [x["metric"]["process_index"] for x in prom.query("goodput_host_outlier")] == ["3"]
        assert _check_panels(prom, calc, clock()) == 13
        # the rest of the run: progress, a crash, a restart and the job's end
        store.append([e for e in events if e.time > hang_at])
        clock.t = events[-1].time + 30
        monitor.run_once()
        calc.refresh()
        total = calc.cumulative(clock()).total_seconds
        prom.wait_until("goodput_total_seconds", lambda r: r and r[0]["value"] == total)
        assert prom.query("goodput_disruptions")[0]["value"] == 1.0
        assert _check_panels(prom, calc, clock()) == 13
    finally:
        prom.stop()
        monitor.stop()
        exporter.close()
        store.close()


def test_the_dashboard_is_importable_grafana_json():
    dash = _grafana()
    assert dash["uid"] and dash["title"] == "Goodput"
    names = {v["name"] for v in dash["templating"]["list"]}
    assert names == {"datasource", "run"}
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "${datasource}"
        assert p["targets"] and all(t["expr"] for t in p["targets"])


def test_alert_rules_with_promtool(tmp_path):
    promtool = binary_or_skip("promtool")
    rules = os.path.join(str(DASHBOARDS), "prometheus-alerts.yml")
    check = subprocess.run([promtool, "check", "rules", rules], capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    # Series sampled every minute (by hand): run "a" hangs from minute 2 on;
    # "b" stops at minute 3; "c" holds 70 % over the last hour, "d" 90 %; "e"
    # ended long ago with 70 % in its last hour and "f" stopped while hung (both
    # not running: their figures are final, no alert but the stop itself).
    tests = textwrap.dedent(f"""\
        rule_files: [{json.dumps(rules)}]
        evaluation_interval: 1m
        tests:
          - interval: 1m
            input_series:
              - series: 'goodput_hung{{run="a"}}'
                values: '0 0 1x28'
              - series: 'goodput_run_running{{run="a"}}'
                values: '1x30'
              - series: 'goodput_run_stopped{{run="b"}}'
                values: '0 0 0 1 1 1'
              - series: 'goodput_run_running{{run="b"}}'
                values: '1 1 1 0 0 0'
              - series: 'goodput_window_ratio{{run="c", window="3600s"}}'
                values: '0.7x30'
              - series: 'goodput_run_running{{run="c"}}'
                values: '1x30'
              - series: 'goodput_window_ratio{{run="d", window="3600s"}}'
                values: '0.9x30'
              - series: 'goodput_run_running{{run="d"}}'
                values: '1x30'
              - series: 'goodput_window_ratio{{run="e", window="3600s"}}'
                values: '0.7x30'
              - series: 'goodput_run_running{{run="e"}}'
                values: '0x30'
              - series: 'goodput_run_stopped{{run="e"}}'
                values: '0x30'
              - series: 'goodput_hung{{run="f"}}'
                values: '1x30'
              - series: 'goodput_run_running{{run="f"}}'
                values: '0x30'
              - series: 'goodput_run_stopped{{run="f"}}'
                values: '1x30'
            alert_rule_test:
              # open at minute 2: not yet a minute at 2m30, firing at 3m
              - eval_time: 2m30s
                alertname: GoodputHangOpen
                exp_alerts: []
              - eval_time: 3m
                alertname: GoodputHangOpen
                exp_alerts:
                  - exp_labels: {{severity: page, run: a}}
                    exp_annotations:
                      summary: "Run a is hung (no training progress for over a minute)"
              - eval_time: 2m
                alertname: GoodputRunStopped
                exp_alerts:
                  - exp_labels: {{severity: page, run: f}}
                    exp_annotations:
                      summary: "Run f stopped"
              - eval_time: 3m
                alertname: GoodputRunStopped
                exp_alerts:
                  - exp_labels: {{severity: page, run: b}}
                    exp_annotations:
                      summary: "Run b stopped"
                  - exp_labels: {{severity: page, run: f}}
                    exp_annotations:
                      summary: "Run f stopped"
              # under 80 % for 10 minutes: "c" only (after the 10 min hold), not
              # the ended "e"; "f" is hung but stopped: said by GoodputRunStopped
              - eval_time: 20m
                alertname: GoodputHangOpen
                exp_alerts:
                  - exp_labels: {{severity: page, run: a}}
                    exp_annotations:
                      summary: "Run a is hung (no training progress for over a minute)"
              - eval_time: 5m
                alertname: GoodputLow
                exp_alerts: []
              - eval_time: 15m
                alertname: GoodputLow
                exp_alerts:
                  - exp_labels: {{severity: ticket, run: c, window: 3600s}}
                    exp_annotations:
                      summary: "Run c: goodput under 80 % over the last hour (70%)"
        """)
    path = tmp_path / "alerts_test.yml"
    path.write_text(tests)
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# None: the engine's own Calculator.state (semantics rule 15), here "ended"
@pytest.mark.parametrize("told, exported", [("stopped", 1.0), ("running", 0.0), ("ended", 0.0),
                                            (None, 0.0)])
def test_goodput_run_stopped_follows_the_calculators_state(told, exported):
    """The monitor cycle reads ``Calculator.state`` where the engine has it; the
    exporter sends 1 for a stopped run, 0 otherwise, nothing where it is not told."""
    from types import SimpleNamespace

    from goodput_core.exporters.base import MonitorSnapshot
    from goodput_core.monitor.cycle import Extras
    from tests.support.prometheus_scrape import scrape

    events, _ = _recorded_events()

    class Told(Calculator):
        def state(self, now=None):
            return SimpleNamespace(state=told)

    calc = (Calculator if told is None else Told)(RUN)
    calc.add(events)
    now = events[-1].time + 5
    extras = Extras().compute(calc, ("goodput",), now, calc.cumulative(now), ())
    exporter = PrometheusExporter(0)
    try:
        exporter.export(MonitorSnapshot(RUN, now, calc.cumulative(now), **extras))
        got = scrape(f"http://127.0.0.1:{exporter.port}/metrics")
    finally:
        exporter.close()
    assert got.get(("goodput_run_stopped", frozenset({("run", RUN)}))) == exported
