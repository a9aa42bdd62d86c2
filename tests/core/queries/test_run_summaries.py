"""Run summaries: each run's figures at a glance, served from a private cache
only while the store reports the same version of a run whose figures no longer
depend on the clock; never stale."""

import json
import os
import stat
import subprocess
import sys
import uuid

import pytest

import goodput_core.queries.calculator as calculator_module
from goodput_core.queries.calculator import Calculator
from goodput_core.queries.run_groups import record_run_group
from goodput_core.queries.summaries import run_summaries, runs_in_group
from goodput_core.record.recorder import Recorder
from goodput_core.stores import open_store
from goodput_core.stores.summary_cache import SummaryCache


def _ended(rec, t0=0.0, steps=5):
    rec.record_job_start_time(t0)
    for k in range(steps):
        rec.record_step_start_time(k, t0 + 1 + k)
    rec.record_step_end_time(steps - 1, t0 + 1 + steps)
    rec.record_job_end_time(t0 + 1 + steps)


@pytest.fixture
def store(tmp_path):
    s = open_store(f"sqlite:///{tmp_path}/g.sqlite")
    for name, t0, group in (("a", 0.0, "sweep"), ("b", 100.0, "sweep"), ("c", 200.0, None)):
        rec = Recorder(name, s, strict=True, clock=lambda: 0.0)
        if group:
            record_run_group(rec, group)
        _ended(rec, t0)
        assert rec.flush(30)
    rec = Recorder("live", s, strict=True, clock=lambda: 0.0)
    rec.record_job_start_time(300.0)
    rec.record_step_start_time(0, 301.0)
    assert rec.flush(30)
    yield s
    s.close()


@pytest.fixture
def counted(monkeypatch):
    """Counts the runs read cold (one Calculator each)."""
    made = []
    real = calculator_module.Calculator

    class Counting(real):
        def __init__(self, run=None, *a, **k):
            made.append(run)
            super().__init__(run, *a, **k)

    monkeypatch.setattr(calculator_module, "Calculator", Counting)
    return made


def test_summaries_equal_the_calculator_and_are_cached_only_when_final(
        store, tmp_path, counted):
    cache = SummaryCache(str(tmp_path / "cache" / "s.sqlite"))
    first = {s.run: s for s in run_summaries(store, now=400.0, cache=cache)}
    assert sorted(counted) == ["a", "b", "c", "live"]
    for name, s in first.items():
        calc = Calculator(name, store)
        calc.refresh()
        r = calc.cumulative(400.0)
        assert (s.goodput, s.total_seconds, s.disruptions) == (r.goodput, r.total_seconds,
                                                               r.disruptions)
    # by hand: a has 5 one-second steps in [1, 6] of its 6 s lifetime, the last closed
    # by its step end; the startup heuristic splits nothing (equal steps): 5/6
    assert first["a"].goodput == pytest.approx(100 * 5 / 6)
    assert first["a"].state == "ended" and first["a"].group == "sweep"
    assert first["live"].state == "running"
    assert first["c"].last_activity == 206.0
    mode = stat.S_IMODE(os.stat(cache.path).st_mode)
    assert mode == 0o600
    counted.clear()
    again = {s.run: s for s in run_summaries(store, now=500.0, cache=cache)}
    # the ended runs come from the cache (their figures and query time unchanged);
    # the running one is read again: its figures depend on the clock
    assert counted == ["live"]
    assert again["a"] == first["a"] and again["a"].query_time == 400.0
    assert again["live"].total_seconds == pytest.approx(200.0)  # 300 -> 500


def test_a_new_event_makes_the_cached_summary_stale_and_it_is_recomputed(
        store, tmp_path, counted):
    cache = SummaryCache(str(tmp_path / "s.sqlite"))
    run_summaries(store, now=400.0, cache=cache)
    # run a gets a new attempt: its version changes
    rec = Recorder("a", store, strict=True, clock=lambda: 0.0)
    rec.record_job_start_time(50.0)
    rec.record_step_start_time(5, 51.0)
    rec.record_step_end_time(5, 52.0)
    rec.record_job_end_time(52.0)
    assert rec.flush(30)
    counted.clear()
    got = {s.run: s for s in run_summaries(store, now=400.0, cache=cache)}
    assert sorted(counted) == ["a", "live"]
    calc = Calculator("a", store)
    calc.refresh()
    assert got["a"].total_seconds == calc.cumulative(400.0).total_seconds == pytest.approx(8)


def test_sqlite_versions_change_with_every_append_rows_and_chunks(tmp_path):
    from goodput_core.events import EventRecord, Kind

    s = open_store(f"sqlite:///{tmp_path}/v.sqlite")
    s.append([EventRecord("r", int(Kind.JOB_START), 1.0)])
    v1 = s.run_versions()["r"]
    s.append([EventRecord("r", int(Kind.STEP_START), 2.0 + i, i) for i in range(5000)])
    v2 = s.run_versions()["r"]
    s.append([EventRecord("q", int(Kind.JOB_START), 1.0)])
    v3 = s.run_versions()
    assert v2 > v1 and v3["r"] == v2 and list(v3) == ["r", "q"]
    s.close()


def test_a_broken_or_disabled_cache_never_breaks_a_listing(store, tmp_path, monkeypatch):
    bad = tmp_path / "corrupt.sqlite"
    bad.write_bytes(b"not a database at all" * 100)
    got = run_summaries(store, now=400.0, cache=SummaryCache(str(bad)))
    assert len(got) == 4
    link = tmp_path / "link.sqlite"
    link.symlink_to(tmp_path / "elsewhere.sqlite")
    assert len(run_summaries(store, now=400.0, cache=SummaryCache(str(link)))) == 4
    assert not (tmp_path / "elsewhere.sqlite").exists()  # the link is not followed
    monkeypatch.setenv("GOODPUT_SUMMARY_CACHE", "off")
    assert SummaryCache.open_default() is None


def test_a_group_reads_only_its_runs_once_summaries_are_cached(store, tmp_path, counted,
                                                               monkeypatch):
    monkeypatch.setenv("GOODPUT_SUMMARY_CACHE", str(tmp_path / "s.sqlite"))
    assert [r for r, _ in runs_in_group(store, "sweep")] == ["a", "b"]
    counted.clear()
    assert [r for r, _ in runs_in_group(store, "sweep")] == ["a", "b"]
    # warm: the running run's summary (never cached) and the group's two runs
    assert sorted(counted) == ["a", "b", "live"]


def test_goodput_runs_summary(store, tmp_path):
    env = {**os.environ, "GOODPUT_SUMMARY_CACHE": str(tmp_path / "s.sqlite")}
    cmd = [sys.executable, "-m", "goodput_core.cli", "runs", "--store", store.url, "--summary"]
    p = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    runs = json.loads(p.stdout)["runs"]
    assert [r["run"] for r in runs] == ["live", "c", "b", "a"]  # newest activity first
    assert runs[3]["group"] == "sweep" and runs[0]["state"] == "running"
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env).stdout
    assert "83.33%" in text and "[sweep]" in text and "running" in text


def test_the_trend_is_the_calculators_cumulative_window_at_each_point():
    """Each point of a summary's trend equals ``calc.window(first start, t)``: on a
    run with a crash and a restart, the same run requeued after the crash (a wait
    for resources between its attempts), one ended and started again later (idle
    time between attempts), and one still running."""
    from goodput_core.events import EventRecord, Kind
    from goodput_core.queries.summaries import goodput_trend
    from tests.support.cli_process import synthetic_job_events

    restarted = synthetic_job_events("restarted")
    crash = next(e.time for e in restarted if e.kind == int(Kind.DISRUPTION))
    restart = [e.time for e in restarted if e.kind == int(Kind.JOB_START)][1]
    requeued = [e._replace(run="requeued") for e in restarted] + [
        EventRecord("requeued", int(Kind.JOB_SUBMITTED), crash + 1, None, None),
        EventRecord("requeued", int(Kind.RESOURCES_GRANTED), restart - 5, None, None)]
    idle = []
    for start, first_step in ((0.0, 0), (20.0, 3)):  # 16 s between the attempts
        idle += [EventRecord("idle", int(Kind.JOB_START), start)]
        idle += [EventRecord("idle", int(Kind.STEP_START), start + 1 + k, first_step + k)
                 for k in range(3)]
        idle += [EventRecord("idle", int(Kind.STEP_END), start + 4, first_step + 2),
                 EventRecord("idle", int(Kind.JOB_END), start + 4)]
    running = [e._replace(run="running") for e in restarted if e.kind != int(Kind.JOB_END)]
    for events, label in ((restarted, None), (requeued, "SCHEDULING"), (idle, "IDLE"),
                          (running, None)):
        calc = Calculator(events[0].run)
        calc.add(events)
        now = max(e.time for e in events) + 50.0
        assert label is None or label in calc.span_arrays(now=now)  # the case it is for
        trend = goodput_trend(calc, now, points=40)
        life = calc.lifetime(now)
        assert len(trend) == 40 and trend[-1][0] == life[1]
        for t, percent in trend:
            assert percent == pytest.approx(calc.window(life[0], t, now=now).goodput,
                                            abs=1e-9), (events[0].run, t - life[0])
