"""Liveness with real processes (semantics.md rule 15): a training process
interrupted by Ctrl-C or killed with SIGKILL, never restarted, reads the same
however late it is read and says it stopped; a live process inside one long
step is kept running by its heartbeats. The store is the embedded SQLite
one; the query time is injected (no test sleeps: the children do)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from goodput_core import Calculator
from goodput_core.events import Kind
from goodput_core.stores import open_store
from tests.support.cli_process import goodput

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HEARTBEAT_S = 1.0

_CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from goodput_core import Recorder

    mode, store = sys.argv[1], sys.argv[2]
    rec = Recorder(mode, store, hang_detection=False)
    with rec.job():
        for k in range(3):
            with rec.step(k):
                time.sleep(0.05)
        with rec.step(3):  # a long step
            if mode == "ctrl-c":
                os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C
                time.sleep(30)
            rec.flush()
            print("ready", flush=True)
            time.sleep(3.5 * %(hb)r)  # more than 3 heartbeat intervals
            print("alive", flush=True)
            sys.stdin.read()  # until the test closes stdin (or kills us)
""") % {"hb": HEARTBEAT_S}


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env["GOODPUT_HEARTBEAT_SECONDS"] = str(HEARTBEAT_S)
    return env


def _start(mode, store):
    return subprocess.Popen([sys.executable, "-c", _CHILD, mode, store], env=_env(), text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _figures(store, run, now):
    calc = Calculator(run, store)
    calc.refresh()
    r = calc.cumulative(now=now)
    return (r.total_seconds, r.productive_seconds, dict(r.badput_seconds), r.goodput), \
        calc.state(now=now)


def _heartbeats(store, run):
    return [e.time for e in open_store(store).read(run)[0] if e.kind == Kind.HEARTBEAT]


def test_ctrl_c_without_restart_reads_the_same_later_and_says_stopped(tmp_path):
    store = f"sqlite:///{tmp_path}/ctrl-c.sqlite"
    child = _start("ctrl-c", store)
    _, err = child.communicate(timeout=120)
    assert "KeyboardInterrupt" in err
    now = time.time()
    first, st = _figures(store, "ctrl-c", now)
    later, st_later = _figures(store, "ctrl-c", now + 3600)
    assert first == later
    assert st == st_later and st.state == "stopped" and st.cause == "exception:KeyboardInterrupt"
    events = open_store(store).read("ctrl-c")[0]
    (d,) = [e.time for e in events if e.kind == Kind.DISRUPTION]
    start = [e.time for e in events if e.kind == Kind.JOB_START][0]
    assert st.stopped_at == d and first[0] == pytest.approx(d - start)
    assert _heartbeats(store, "ctrl-c")  # the lead writer did beat
    # the command a user runs, twice: the same figures, and it says so
    reps = [goodput("report", "ctrl-c", "--store", store, "--json") for _ in range(2)]
    a, b = (json.loads(r.stdout) for r in reps)
    assert a["goodput_percent"] == b["goodput_percent"] and a["total_seconds"] == b["total_seconds"]
    assert a["state"]["state"] == "stopped" and a["state"]["cause"] == "exception:KeyboardInterrupt"
    text = goodput("report", "ctrl-c", "--store", store).stdout
    assert f"stopped at {a['state']['stopped_at_iso']} (exception:KeyboardInterrupt)" in text
    runs = goodput("runs", "--store", store, "--state").stdout
    assert f"stopped at {a['state']['stopped_at_iso']} (exception:KeyboardInterrupt)" in runs


def test_sigkill_without_restart_stops_at_the_last_sign_of_life(tmp_path):
    store = f"sqlite:///{tmp_path}/kill.sqlite"
    child = _start("kill", store)
    try:
        assert child.stdout.readline().strip() == "ready"
        assert child.stdout.readline().strip() == "alive"
    finally:
        child.kill()  # SIGKILL: no atexit, nothing more is written
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    beats = _heartbeats(store, "kill")
    assert len(beats) >= 3  # 3.5 intervals inside the step, beyond the first
    last = max(e.time for e in open_store(store).read("kill")[0])
    assert last == beats[-1]  # inside the long step, the heartbeat is the last sign
    # read when the silence is past 3 intervals, and an hour later
    now = last + 3 * HEARTBEAT_S + 1
    first, st = _figures(store, "kill", now)
    later, st_later = _figures(store, "kill", now + 3600)
    assert first == later and st == st_later
    assert (st.state, st.stopped_at, st.cause) == ("stopped", last, "no sign of life")
    start = [e.time for e in open_store(store).read("kill")[0] if e.kind == Kind.JOB_START][0]
    assert first[0] == pytest.approx(last - start)


def test_a_live_process_inside_one_long_step_is_not_stopped(tmp_path):
    store = f"sqlite:///{tmp_path}/live.sqlite"
    child = _start("live", store)
    try:
        assert child.stdout.readline().strip() == "ready"
        assert child.stdout.readline().strip() == "alive"
        now = time.time()
        events = open_store(store).read("live")[0]
        step3 = [e.time for e in events if e.kind == Kind.STEP_START and e.step == 3][0]
        # the step has run for more than 3 intervals: only heartbeats keep it alive
        assert now - step3 > 3 * HEARTBEAT_S
        (total, *_), st = _figures(store, "live", now)
        assert st.state == "running" and st.heartbeat_seconds == HEARTBEAT_S
        start = [e.time for e in events if e.kind == Kind.JOB_START][0]
        assert total == pytest.approx(now - start)
        assert max(_heartbeats(store, "live")) > step3 + 2 * HEARTBEAT_S
    finally:
        child.stdin.close()  # the step ends, the job ends
        child.wait(timeout=60)
    assert child.returncode == 0
    calc = Calculator("live", store)
    calc.refresh()
    assert calc.state().state == "ended"
