"""Semantics rule 13, an observer's tail (goodput_core/timeline/observer_tail.py):
after the lead's graceful job end, a process that only observed (the MaxText
watcher of goodput_integrations/maxtext/whole_process.py) records a custom
badput from that job end to the training process's exit and a job end
there; the job's attempt ends at the observer's job end. Its edge cases with
figures derived by hand (each test names the break it fails with), through
the calculator read both ways (records, and a SQLite store by columns), and
two real processes on SQLite and a real PostgreSQL server, read mid-run,
between the two and after. Times are seconds from 0, ``S3@4`` is "step 3
started at 4"."""

from __future__ import annotations

import json
import uuid

import pytest

from goodput_core import Calculator
from goodput_core.events import Kind
from goodput_core.timeline.buckets import BadputType as B
from tests.support import observer_tail_processes as procs
from tests.support.cli_process import goodput
from tests.support.writers import Writer, job

NOW = 1000.0
SHUTDOWN = {"custom_badput_event_type": "shutdown"}
REC, WASTED, CUSTOM = B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION, \
    B.WASTED_PROGRESS_FROM_DISRUPTION, B.CUSTOM_BADPUT_EVENTS


def _figures(calc, now=NOW):
    r = calc.cumulative(now=now)
    return r, {b: v for b, v in r.badput_seconds.items()
               if abs(v) > 1e-9 and b is not B.DATA_LOADING_ASYNC}


def _hosts(*attempts):
    """Hosts 0 and 1, one pid per attempt ``(job start, first step, step
    starts, job end or None)``."""
    out = []
    for i in (0, 1):
        for pid, (start, first, times, end) in enumerate(attempts, 1):
            w = Writer(i, f"h{i}", pid=pid).ev(Kind.JOB_START, start).steps(first, times)
            if end is not None:
                w.ev(Kind.JOB_END, end)
            out.append(w)
    return out


def _watcher(cb, end, index=0, host="h0", pid=9):
    """An observer: custom badput shutdown ``cb`` (None: none) and a job end."""
    w = Writer(index, host, pid=pid)
    if cb is not None:
        w.ev(Kind.CUSTOM_BADPUT_START, cb[0], extra=SHUTDOWN)
        w.ev(Kind.CUSTOM_BADPUT_END, cb[1], extra=SHUTDOWN)
    return w.ev(Kind.JOB_END, end)


ONE = (0.0, 0, [1.0 + k for k in range(9)], 10.0)  # S0@1 .. S8@9, job end 10


# the tests below run twice: records given to the calculator, and a SQLite store
# read by columns per writer (tests/core/conftest.py, read_path)
@pytest.mark.parametrize("watch", [
    pytest.param(((8.0, 9.5), 9.5), id="job end before the lead's"),
    pytest.param((None, 13.0), id="a job end only"),
    pytest.param(((10.0, 13.0), 13.0, 1, "h1"), id="another index"),
])
@pytest.mark.usefixtures("read_path")
def test_what_is_no_tail(watch):
    """Hosts 0 and 1: job start 0, S0@1 .. S8@9, job end 10; the observer
    records a shutdown [8, 9.5) and a job end at 9.5 (before the lead's),
    or only a job end at 13 (it says nothing of the time it would add),
    or a shutdown [10, 13) and a job end at 13 under index 1 (host 1's
    job end is not the job's, nor is its watcher's). None is a tail: the
    job is the hosts' alone. (Broken: any observer's job end after the
    lead's start is a tail; a bare job end, or index 1's, extends the
    job to 13.)"""
    r, bad = _figures(job(*_hosts(ONE), _watcher(*watch)))
    # OTHER [0, 1) = 1; S0..S8 [1, 10) productive 9; total 10
    assert r.lifetime == (0.0, 10.0)
    assert (r.total_seconds, r.productive_seconds) == pytest.approx((10.0, 9.0))
    assert bad == pytest.approx({B.OTHER: 1.0})
    assert r.custom_badput_percent == {}

@pytest.mark.usefixtures("read_path")
def test_no_tail_after_a_crash():
    """Attempt 1 (job start 0, S0@1 .. S5@6) ends at host 0's SIGTERM at
    6.5, no job end; attempt 2 (job start 20, S4@21 .. S7@24, job end 25).
    The observer records a shutdown [6.5, 9) and a job end at 9: the
    lead ended at a disruption, so there is no tail (the watcher records
    none then: it starts at a job end). (Broken: the tail of a lead that
    did not end at a job end: attempt 1 ends at 9, with a shutdown.)"""
    hosts = _hosts((0.0, 0, [1.0 + k for k in range(6)], None),
                   (20.0, 4, [21.0 + k for k in range(4)], 25.0))
    hosts[0].disruption(6.5)
    r, bad = _figures(job(*hosts, _watcher((6.5, 9.0), 9.0)))
    # restart at step 4: wasted S4 [5, 6) and S5 [6, 6.5) = 1.5; recovery
    # [6.5, 20) = 13.5; productive [1, 5) + [21, 25) = 8; OTHER [0, 1) +
    # [20, 21) = 2; total 25
    assert r.disruptions == 1
    assert r.total_seconds == pytest.approx(25.0)
    assert r.productive_seconds == pytest.approx(8.0)
    assert bad == pytest.approx({WASTED: 1.5, REC: 13.5, B.OTHER: 2.0})

@pytest.mark.parametrize("until", [7.5, 9.0])
@pytest.mark.usefixtures("read_path")
def test_a_tail_ends_before_the_next_attempt_starts(until):
    """Attempt 1: job start 0, S0@1 .. S4@5, job end 6; attempt 2: job
    start 8, S5@9 .. S8@12, job end 13. The observer's shutdown runs from
    6 to ``until`` and its job end is there: at 7.5 it is attempt 1's
    tail; at 9 the next attempt had started (at 8) while the old process
    still shut down, so it is none. (Broken: a tail reaching the next
    attempt extends attempt 1 over it.)"""
    hosts = _hosts((0.0, 0, [1.0 + k for k in range(5)], 6.0),
                   (8.0, 5, [9.0 + k for k in range(4)], 13.0))
    r, bad = _figures(job(*hosts, _watcher((6.0, until), until)))
    # productive [1, 6) + [9, 13) = 9; OTHER [0, 1) + [8, 9) = 2; at 7.5:
    # shutdown [6, 7.5) = 1.5, idle [7.5, 8) = 0.5, total 12.5; at 9: idle
    # [6, 8) = 2, total 11
    tail = until == 7.5
    assert r.productive_seconds == pytest.approx(9.0)
    assert r.total_seconds == pytest.approx(12.5 if tail else 11.0)
    assert r.idle_seconds == pytest.approx(0.5 if tail else 2.0)
    assert bad == pytest.approx({B.OTHER: 2.0, CUSTOM: 1.5} if tail else {B.OTHER: 2.0})
    assert r.disruptions == 0

@pytest.mark.usefixtures("read_path")
def test_of_several_observers_the_latest_job_end_of_the_leads_index():
    """Job start 0, S0@1 .. S8@9, job end 10 (hosts 0 and 1); observers
    of index 0 end at 12 and 14 (shutdowns [10, 12) and [10, 14)), one of
    index 1 at 16: the tail is the one of index 0 that ended last, [10,
    14). (Broken: the first observer's, or the latest of any index.)"""
    # (the one ending at 12 comes first in the pieces' order: ("h0", 10) < ("h0", 9))
    watchers = [_watcher((10.0, 12.0), 12.0, pid=10), _watcher((10.0, 14.0), 14.0, pid=9),
                _watcher((10.0, 16.0), 16.0, index=1, host="h1", pid=9)]
    r, bad = _figures(job(*_hosts(ONE), *watchers))
    # OTHER 1, productive [1, 10) = 9, shutdown [10, 14) = 4; total 14
    assert r.lifetime == (0.0, 14.0)
    assert r.productive_seconds == pytest.approx(9.0)
    assert bad == pytest.approx({B.OTHER: 1.0, CUSTOM: 4.0})


# ------------------------------------------------------------ real processes
T0 = 1_700_000_000.0


def _read(calc, now):
    calc.refresh()
    r, bad = _figures(calc, now)
    return r, bad, calc.state(now=now).state


def _check_real(store: str, heartbeat_s: float) -> str:
    """The training process, then its observer, as real processes; the run
    read by one calculator as it goes (mid-run, between the two, after) and
    by a fresh one at the end."""
    run = "tail-" + uuid.uuid4().hex[:8]
    half, go = procs.events()
    train = procs.spawn(procs.train, store, run, T0, heartbeat_s, half, go)
    try:
        assert half.wait(procs.WAIT_S)
        live = Calculator(run, store)
        r, bad, _ = _read(live, T0 + 5.5)
        # mid-run: job start 0, S0@1 .. S4@5 stored, asked at 5.5: productive
        # [1, 5) = 4, OTHER [0, 1) and the open S4 [5, 5.5) = 1.5; total 5.5
        assert (r.total_seconds, r.productive_seconds) == pytest.approx((5.5, 4.0))
        assert bad == pytest.approx({B.OTHER: 1.5})
    finally:
        go.set()
        procs.joined(train)
    r, bad, state = _read(live, T0 + 20.0)
    # the training process gone, no observer yet: S0..S8 [1, 10) productive
    # 9, OTHER [0, 1) = 1; total 10, ended
    assert (r.total_seconds, r.productive_seconds, state) == pytest.approx((10.0, 9.0, "ended"))
    procs.joined(procs.spawn(procs.observe, store, run, T0, heartbeat_s))
    for calc in (live, Calculator(run, store)):  # the live reader, and a cold one
        r, bad, state = _read(calc, T0 + 20.0)
        # the observer's tail: shutdown [10, 13) = 3; the attempt ends at 13
        assert r.lifetime == (T0, T0 + 13.0)
        assert (r.total_seconds, r.productive_seconds) == pytest.approx((13.0, 9.0))
        assert bad == pytest.approx({B.OTHER: 1.0, CUSTOM: 3.0})
        assert set(r.custom_badput_percent) == {"SHUTDOWN"}
        assert (r.disruptions, state) == (0, "ended")
    return run


@pytest.mark.parametrize("heartbeat_s", [1.0, 0.0])
def test_a_real_observer_process_on_sqlite(tmp_path, heartbeat_s):
    store = f"sqlite:///{tmp_path / 'tail.sqlite'}"
    run = _check_real(store, heartbeat_s)
    if heartbeat_s:  # what a user runs says the same
        rep = json.loads(goodput("report", run, "--store", store, "--json").stdout)
        assert rep["total_seconds"] == pytest.approx(13.0)
        assert rep["state"]["state"] == "ended"


def test_a_real_observer_process_on_postgres(postgres_url):
    _check_real(postgres_url, 1.0)
