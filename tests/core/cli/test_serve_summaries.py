"""``goodput serve``'s runs list is made of run summaries, the same as ``goodput
runs --summary``: it agrees with that command and with the calculator on ended,
stopped and running runs, serves ended and stopped runs from the summary cache
while the store reports them unchanged, and shows a run with new events updated
on the next read (never a stale row)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from goodput_core.cli.serve.api import Api
from goodput_core.cli.serve.runs import RunCache
from goodput_core.events import EventRecord, Kind
from goodput_core.queries.calculator import Calculator
from goodput_core.stores import open_store
from goodput_core.stores.memory import MemoryStore
from goodput_core.stores.summary_cache import SummaryCache
from tests.core.queries.test_run_summaries import counted  # noqa: F401  (a fixture)
from tests.core.cli.test_serve_api import T0, _simple
from tests.support.dashboard import dashboard, get_json
from tests.support.fake_clock import FakeClock


def _stopped(run: str):
    """The first 50 s of ``_simple`` and a crash at 50 s: stopped at once."""
    evs = [e for e in _simple(run, group="sweep") if e.time <= T0 + 50]
    return evs + [EventRecord(run, int(Kind.DISRUPTION), T0 + 50, None,
                              {"disruption_cause": "crash"})]


def _running(run: str, start: float):
    """The first 50 s of ``_simple`` moved to begin at ``start`` (no end)."""
    return [EventRecord(run, e.kind, e.time - T0 + start, e.step, e.extra)
            for e in _simple(run) if e.time <= T0 + 50]


def _figures(calc: Calculator, now: float) -> dict:
    r = calc.cumulative(now)
    st = calc.state(now)
    return {"goodput_percent": r.goodput, "total_seconds": r.total_seconds, "state": st.state}


def test_the_runs_api_agrees_with_runs_summary_and_the_calculator(tmp_path):
    now = time.time()
    url = f"sqlite:///{tmp_path}/fleet.sqlite"
    store = open_store(url)
    store.append(_simple("ended", group="sweep"))
    store.append(_stopped("stopped"))
    store.append(_running("running", now - 60))
    store.close()
    env = {**os.environ, "GOODPUT_SUMMARY_CACHE": str(tmp_path / "cli-cache.sqlite")}
    cli = subprocess.run([sys.executable, "-m", "goodput_core.cli", "runs", "--summary",
                          "--json", "--store", url], capture_output=True, text=True,
                         timeout=120, env=env)
    assert cli.returncode == 0, cli.stderr
    printed = {r["run"]: r for r in json.loads(cli.stdout)["runs"]}
    # the server's clock is fixed: its running row is the calculator's at that time
    with dashboard(url, clock=FakeClock(now),
                   summary_cache=SummaryCache(str(tmp_path / "serve-cache.sqlite"))) as srv:
        listed = get_json(srv.url + "api/runs")
    rows = {r["run"]: r for r in listed["runs"]}
    assert listed["pending"] == 0 and sorted(rows) == ["ended", "running", "stopped"]
    assert [r["run"] for r in listed["runs"]] == ["running", "ended", "stopped"]  # newest activity first
    assert rows["ended"]["goodput_percent"] == pytest.approx(90.0)  # by hand: 90 s of 100
    reader = open_store(url, create=False)
    try:
        for name, row in rows.items():
            calc = Calculator(name, reader)
            events = calc.refresh()
            expected = _figures(calc, now)
            assert {k: row[k] for k in expected} == pytest.approx(expected), name
            assert row["events"] == events
            # the sparkline ends at the lifetime's end with the cumulative goodput
            assert row["sparkline"][-1] == pytest.approx([calc.lifetime(now)[1],
                                                          expected["goodput_percent"]])
    finally:
        reader.close()
    assert rows["stopped"]["state_since"] == T0 + 50
    # ended and stopped runs do not depend on the clock: the command says the same
    for name in ("ended", "stopped"):
        row, cmd = rows[name], printed[name]
        assert (row["goodput_percent"], row["total_seconds"], row["state"],
                row["state_since"], row["last_activity"], row["group"], row["events"],
                row["sparkline"]) == \
            (cmd["goodput"], cmd["total_seconds"], cmd["state"], cmd["state_since"],
             cmd["last_activity"], cmd["group"], cmd["events"], cmd["trend"])
    assert printed["running"]["state"] == rows["running"]["state"] == "running"


def test_rows_are_never_stale_and_unchanged_ended_runs_are_not_read_again(
        tmp_path, counted):  # noqa: F811
    clock = FakeClock(T0 + 60)
    store = MemoryStore("never-stale")
    store.append(_simple("ended"))
    store.append(_stopped("stopped"))
    store.append([e for e in _simple("running") if e.time <= T0 + 50])
    # min_interval: no time-based re-read at all; only a version that moved reads again
    cache = RunCache(store, clock=clock, min_interval=1e9,
                     summary_cache=SummaryCache(str(tmp_path / "s.sqlite")))
    api = Api(cache, budget_s=60.0)

    def listing():
        return {r["run"]: r for r in api.runs({})["runs"]}

    first = listing()
    assert sorted(counted) == ["ended", "running", "stopped"]  # each read once, cold
    assert (first["ended"]["state"], first["stopped"]["state"], first["running"]["state"]) \
        == ("ended", "stopped", "running")
    assert first["running"]["total_seconds"] == pytest.approx(60.0)  # 0 -> the clock's 60 s
    counted.clear()
    clock.advance(10)
    second = listing()
    # nothing read cold: ended and stopped come from the cache, the running run from
    # its kept calculator, its figures at the new time
    assert counted == []
    assert second["ended"] == first["ended"] and second["stopped"] == first["stopped"]
    assert second["running"]["total_seconds"] == pytest.approx(70.0)
    # new events for every run: each row shows them on the next read
    metric = {"metric_name": "loss", "metric_value": 1.0}
    for run in ("ended", "stopped"):
        store.append([EventRecord(run, int(Kind.METRIC), T0 + 40, None, metric)])
    store.append([EventRecord("running", int(Kind.STEP_START), T0 + 60, 5, None)])
    third = listing()
    assert sorted(counted) == ["ended", "stopped"]  # changed, not kept: read again
    for run in ("ended", "stopped", "running"):
        assert third[run]["events"] == first[run]["events"] + 1, run
    assert third["running"]["last_activity"] == T0 + 60


def test_the_runs_page_stream_says_change_when_a_run_no_page_holds_gets_an_event(tmp_path):
    import pickle
    import urllib.request

    url = f"sqlite:///{tmp_path}/ended.sqlite"
    store = open_store(url)
    store.append(_simple("ended"))
    store.close()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with dashboard(url, summary_cache=None) as srv:
        [row] = get_json(srv.url + "api/runs")["runs"]
        assert row["state"] == "ended" and srv.api.cache._entries == {}  # none kept
        with opener.open(srv.url + "api/stream", timeout=30) as stream:
            assert stream.readline() == b"retry: 1000\n"
            code = ("import sys, pickle; from goodput_core.stores import open_store; "
                    "s = open_store(sys.argv[1]); s.append(pickle.loads(sys.stdin.buffer.read())); "
                    "s.close()")
            metric = EventRecord("ended", int(Kind.METRIC), T0 + 50, None,
                                 {"metric_name": "loss", "metric_value": 1.0})
            subprocess.run([sys.executable, "-c", code, url], input=pickle.dumps([metric]),
                           check=True, timeout=60)
            lines = [stream.readline() for _ in range(3)]  # blocks until the change
        assert b"event: change\n" in lines
        [again] = get_json(srv.url + "api/runs")["runs"]
    assert again["events"] == row["events"] + 1
