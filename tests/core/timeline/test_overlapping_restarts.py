"""Issue 40's two lost attempts, with real processes through the public
Recorder, on SQLite and a real PostgreSQL server (semantics rule 13: no
attempt is lost to liveness): a restart whose old process is still shutting
down (its heartbeats flowing) while the new one starts, and a crash and a
restart recorded with explicit past times beside heartbeats stamped now.
Each gives 1 disruption, the second attempt's steps and the state "ended",
with heartbeats on as with them off; the run's trace has a span for the
second attempt. The expected figures are derived by hand in the comments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from goodput_core import Calculator
from goodput_core.events import Kind
from goodput_core.stores import open_store
from goodput_core.timeline.buckets import BadputType as B
from tests.support.cli_process import goodput
from tests.support.overlapping_restarts import play_explicit, play_overlap
from tests.support.postgres_server import find_bindir

T0 = 1_700_000_000.0
REC, WASTED = B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION, B.WASTED_PROGRESS_FROM_DISRUPTION


def _read(store, run, now):
    calc = Calculator(run, store)
    calc.refresh()
    r = calc.cumulative(now=now)
    bad = {b: v for b, v in r.badput_seconds.items()
           if abs(v) > 1e-9 and b is not B.DATA_LOADING_ASYNC}
    return r, bad, calc.state(now=now)


def _check_overlap(store, heartbeat_s):
    run = "overlap-" + uuid.uuid4().hex[:8]
    play_overlap(store, run, T0, heartbeat_s)
    events = open_store(store).read(run)[0]
    beats = [e.time - T0 for e in events if e.kind == Kind.HEARTBEAT and e.host == "pod-a"]
    if heartbeat_s:  # the old pod did beat through the new pod's start
        assert max(beats) == pytest.approx(24.0)
    else:
        assert beats == []
    r, bad, st = _read(store, run, T0 + 1000)
    # A: steps 0..19 [0, 20), each closed by its step end: productive 20; its
    # SIGTERM at 20 starts the recovery to B's job start at 21: 1 s; B: steps
    # 20..39 [21, 41): productive 20; total 41
    assert (r.disruptions, r.last_step, r.max_productive_step) == (1, 39, 39)
    assert r.total_seconds == pytest.approx(41.0)
    assert r.productive_seconds == pytest.approx(40.0)
    assert bad == pytest.approx({REC: 1.0})
    assert st.state == "ended"
    return r


def _check_explicit(store, heartbeat_s):
    run = "explicit-" + uuid.uuid4().hex[:8]
    t = time.time() - 1000.0  # explicit times a thousand seconds before the heartbeats
    play_explicit(store, run, t, heartbeat_s)
    r, bad, st = _read(store, run, time.time() + 10)
    # restart at step 10: A's spans of steps 10..13 [16, 22) and step 14 [22, 25.2)
    # (closed by the crash) are wasted: 9.2; recovery [25.2, 40): 14.8;
    # productive: A's steps 0..9 [1, 16) = 15 and B's 10..24 [42, 72) = 30;
    # OTHER [0, 1) + [40, 42) = 3; total 72
    assert (r.disruptions, r.last_step, r.max_productive_step) == (1, 24, 24)
    assert r.total_seconds == pytest.approx(72.0)
    assert r.productive_seconds == pytest.approx(45.0)
    assert bad == pytest.approx({WASTED: 9.2, REC: 14.8, B.OTHER: 3.0})
    assert st.state == "ended"
    return run, t, r


@pytest.mark.parametrize("heartbeat_s", [1.0, 0.0])
def test_a_restart_overlapping_the_old_pods_shutdown_on_sqlite(tmp_path, heartbeat_s):
    _check_overlap(f"sqlite:///{tmp_path / 'o.sqlite'}", heartbeat_s)


@pytest.mark.parametrize("heartbeat_s", [1.0, 0.0])
def test_explicit_past_times_beside_heartbeats_stamped_now_on_sqlite(tmp_path, heartbeat_s):
    store = f"sqlite:///{tmp_path / 'e.sqlite'}"
    run, t, r = _check_explicit(store, heartbeat_s)
    if not heartbeat_s:
        return
    # what a user runs: `goodput report` says the same
    rep = json.loads(goodput("report", run, "--store", store, "--json").stdout)
    assert rep["state"]["state"] == "ended"
    assert rep["total_seconds"] == pytest.approx(72.0)
    assert rep["goodput_percent"] == pytest.approx(100 * 45.0 / 72.0)


def test_the_second_attempt_of_explicit_times_has_its_span_in_the_trace(tmp_path):
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from tests.support.otlp_receivers import HttpReceiver, spans

    store = f"sqlite:///{tmp_path / 't.sqlite'}"
    run, t, _ = _check_explicit(store, 1.0)
    receiver = HttpReceiver()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    try:
        p = subprocess.run([sys.executable, "-m", "goodput_core.cli", "export", run, "--store",
                            store, "--format", "otlp", "--endpoint", receiver.endpoint],
                           capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0, p.stderr
        attempts = sorted((s.name, round(s.start_time_unix_nano / 1e9 - t, 3),
                           round(s.end_time_unix_nano / 1e9 - t, 3))
                          for s in spans(receiver.traces) if s.name.startswith("attempt"))
    finally:
        receiver.close()
    # attempt 1 from its job start to the next one (it crashed); attempt 2 to its job end
    assert attempts == [("attempt 1", 0.0, 40.0), ("attempt 2", 40.0, 72.0)]


@pytest.fixture(scope="module")
def pg(request):
    if find_bindir() is None:
        if os.environ.get("CI"):
            raise RuntimeError("PostgreSQL server binaries missing: apt-get install postgresql")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    return request.getfixturevalue("postgres_server")


def test_both_restarts_on_postgres(pg, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    name = "t_" + uuid.uuid4().hex[:12]
    pg.create_database(name)
    _check_overlap(pg.url(name), 1.0)
    _check_explicit(pg.url(name), 1.0)
