"""The whole MaxText process in the report: the head (imports and config
before MaxText's job start) as training preparation, the tail (after its job
end) as the custom badput SHUTDOWN; in a real launched process, the report's
total within 1 s of the process's wall time."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from goodput_core import Calculator, Recorder, open_store
from goodput_core.events import to_payload
from goodput_core.timeline.buckets import BadputType
from goodput_integrations.maxtext import whole_process
from tests.support.fake_clock import FakeClock

ROOT = Path(__file__).resolve().parents[3]
T0 = 1_700_000_000.0


def test_process_start_is_the_oses(tmp_path):
    # a child reads its own start; the parent brackets the child's life
    before = time.time()
    out = subprocess.run([sys.executable, "-c", "from goodput_integrations.maxtext import "
                          "whole_process as w; print(repr(w.process_start_time()))"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    after = time.time()
    start = float(out)
    assert before - 0.02 <= start <= after  # /proc's ticks: 10 ms


def test_head_and_tail_with_a_fake_clock(monkeypatch):
    exits = []
    monkeypatch.setattr(whole_process.atexit, "register", exits.append)
    monkeypatch.setattr(whole_process, "_head_taken", False)
    clock = FakeClock(T0 + 5.0)  # MaxText's job start comes 5 s after the process start
    url = f"memory://whole-{uuid.uuid4().hex}"
    rec = Recorder("wp", url, clock=clock)
    whole_process.track(rec, process_start=T0)
    rec.record_job_start_time()
    for step in range(3):
        clock.advance(5.0)
        rec.record_step_start_time(step)
    clock.advance(5.0)
    rec.record_job_end_time()  # T0 + 25
    clock.advance(3.0)
    (tail,) = exits
    tail()  # at exit, T0 + 28
    assert rec.close(30)
    calc = Calculator("wp", url, clock=clock)
    calc.refresh()
    r = calc.cumulative(T0 + 100)
    # by hand: lifetime T0..T0+28; head T0..T0+5 training prep; tail T0+25..T0+28 SHUTDOWN;
    # step spans T0+10..T0+25 (steps 0-2, closed by the first job end)
    assert r.lifetime == (T0, T0 + 28.0)
    assert r.badput_seconds[BadputType.TRAINING_PREP] == pytest.approx(5.0)
    assert r.badput_seconds[BadputType.CUSTOM_BADPUT_EVENTS] == pytest.approx(3.0)
    assert set(r.custom_badput_percent) == {"SHUTDOWN"}
    assert r.disruptions == 0


def test_a_second_job_start_in_the_process_is_not_moved(monkeypatch):
    monkeypatch.setattr(whole_process, "_head_taken", True)  # the head went to an earlier one
    clock = FakeClock(T0 + 5.0)
    url = f"memory://whole-{uuid.uuid4().hex}"
    rec = Recorder("wp2", url, clock=clock)
    whole_process.track(rec, process_start=T0)
    rec.record_job_start_time()
    assert rec.close(30)
    calc = Calculator("wp2", url, clock=clock)
    calc.refresh()
    assert calc.cumulative(T0 + 10).lifetime[0] == T0 + 5.0


def _wait_for_watcher(run: str) -> int:
    """Waits for the exit of the watcher processes of ``run`` (pidfd: no polling);
    returns how many there were."""
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            fd = os.pidfd_open(int(pid))
        except OSError:
            continue  # gone already
        try:
            if b"goodput_integrations.maxtext.whole_process" in argv and run.encode() in argv:
                found += 1
                assert select.select([fd], [], [], 60)[0], "the watcher did not end"
        finally:
            os.close(fd)
    return found


TRAIN = textwrap.dedent("""
    import sys
    sum(range(3 * 10**6))  # "imports and config": work before MaxText's job start
    from ml_goodput_measurement import goodput
    rec = goodput.GoodputRecorder(sys.argv[1], "goodput_" + sys.argv[1], True)
    rec.record_job_start_time()
    rec.record_tpu_init_start_time()
    rec.record_tpu_init_end_time()
    for step in range(3):
        rec.record_step_start_time(step)
        sum(range(10**6))
    rec.record_job_end_time()
    sum(range(3 * 10**6))  # shutdown work after the job end
""")


def test_a_launched_process_is_accounted_for_from_start_to_exit(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    store = f"sqlite:///{tmp_path / 'wp.sqlite'}"
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "goodput_integrations.maxtext.launch",
                           f"--goodput-store={store}", "--goodput-no-checkpoint-stats",
                           "train.py", "launched"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    t1 = time.time()
    assert proc.returncode == 0, proc.stderr
    _wait_for_watcher("launched")  # it records the tail once the process is gone
    calc = Calculator("launched", store, clock=lambda: t1)
    calc.refresh()
    r = calc.cumulative(t1)
    start, end = r.lifetime
    assert t0 - 0.02 <= start <= t0 + 1.0  # the OS's start of the child, not MaxText's
    # the exit as the watcher saw it: when the pipe closed, give or take scheduling
    assert t1 - 1.0 <= end <= t1 + 0.5
    assert abs(r.total_seconds - (t1 - t0)) <= 1.0
    assert r.badput_seconds[BadputType.TRAINING_PREP] > 0  # interpreter, imports, the loop
    assert set(r.custom_badput_percent) == {"SHUTDOWN"}
    assert r.badput_seconds[BadputType.CUSTOM_BADPUT_EVENTS] > 0
    # the tail starts at MaxText's own job end, to the microsecond: no sliver of
    # the shutdown is left to the last step
    payloads = [to_payload(e) for e in open_store(store).read("launched")[0]]
    job_ends = sorted(p["job_end_time"] for p in payloads if "job_end_time" in p)
    tail_starts = [p["custom_badput_event_start_time"] for p in payloads
                   if "custom_badput_event_start_time" in p]
    assert len(job_ends) == 2 and tail_starts == [job_ends[0]]


FORK_TRAIN = textwrap.dedent("""
    import sys, types
    sum(range(3 * 10**6))  # "imports and config"
    # a fork's maxtext/common/goodput.py is this one line of the README
    from goodput_integrations.maxtext.fork import *  # noqa: F401,F403
    config = types.SimpleNamespace(run_name=sys.argv[1], goodput_job_name="",
                                   enable_goodput_recording=True, monitor_goodput=False,
                                   goodput_store=sys.argv[2], checkpoint_stats=False)
    rec = create_goodput_recorder(config)
    record_goodput(rec, RECORD_JOB_START_TIME)
    for step in range(3):
        record_goodput(rec, "record_step_start_time", step)
        sum(range(10**6))
    record_goodput(rec, RECORD_JOB_END_TIME)
    sum(range(3 * 10**6))  # shutdown work
""")


def test_a_fork_process_is_accounted_for_from_start_to_exit(tmp_path):
    store = f"sqlite:///{tmp_path / 'fork.sqlite'}"
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-c", FORK_TRAIN, "forked", store],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    t1 = time.time()
    assert proc.returncode == 0, proc.stderr
    _wait_for_watcher("forked")
    calc = Calculator("forked", store, clock=lambda: t1)
    calc.refresh()
    r = calc.cumulative(t1)
    assert t0 - 0.02 <= r.lifetime[0] <= t0 + 1.0
    assert abs(r.total_seconds - (t1 - t0)) <= 1.0
    assert r.badput_seconds[BadputType.TRAINING_PREP] > 0
    assert set(r.custom_badput_percent) == {"SHUTDOWN"}


def test_a_later_job_start_cancels_the_watcher(tmp_path, monkeypatch):
    monkeypatch.setattr(whole_process, "_head_taken", True)
    # The watcher is this process's child: once cancelled it may exit (a zombie,
    # no cmdline in /proc) before a scan of /proc, so it is held by its Popen.
    watchers = []
    watch = whole_process._watch
    monkeypatch.setattr(whole_process, "_watch",
                        lambda *a: watchers.append(watch(*a)) or watchers[-1])
    store = f"sqlite:///{tmp_path / 'cancel.sqlite'}"
    rec = Recorder("cancelled", store)  # real time: the watcher path
    whole_process.track(rec, process_start=time.time() - 10)
    rec.record_job_start_time()
    rec.record_job_end_time()  # starts the watcher
    rec.record_job_start_time()  # a second attempt in this process: no tail
    assert rec.close(30)
    assert len(watchers) == 1 and watchers[0] is not None
    assert watchers[0].wait(60) == 0  # it ended on "cancel", having recorded nothing
    calc = Calculator("cancelled", store)
    calc.refresh()
    assert calc.cumulative().custom_badput_percent == {}
