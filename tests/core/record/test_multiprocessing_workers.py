"""R9 of docs/quality.md: multiprocessing workers that end normally keep their events.

multiprocessing ends its children with ``os._exit`` after the target returns,
so atexit never runs there and the writer thread is a daemon: the recorder
flushes from multiprocessing's own exit finalizers. Real processes, real
SQLite, both start methods, ``Process`` and ``Pool``.
"""

from __future__ import annotations

import collections
import multiprocessing
import os

import pytest

from goodput_core import Recorder, open_store
from tests.support import mp_workers

METHODS = [m for m in ("fork", "spawn") if m in multiprocessing.get_all_start_methods()]
N = 200


def _run(procs):
    """Starts the processes, waits for them to end normally; returns them."""
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    return procs


@pytest.mark.parametrize("method", METHODS)
def test_r9_process_workers_keep_their_events(tmp_path, method):
    db = str(tmp_path / "r9.sqlite")
    ctx = multiprocessing.get_context(method)
    procs = _run([ctx.Process(target=mp_workers.record_in_child, args=(db, "r9", N))
                  for _ in range(4)])
    events, _ = open_store(db).read("r9")
    by_pid = collections.Counter(e.pid for e in events)
    assert sorted(by_pid) == sorted(p.pid for p in procs)
    assert set(by_pid.values()) == {N}


@pytest.mark.skipif("fork" not in METHODS, reason="needs the fork start method")
def test_r9_forked_workers_with_the_parents_recorder_keep_their_events(tmp_path):
    db = str(tmp_path / "r9.sqlite")
    rec = Recorder("r9", db, flush_interval_s=60)
    rec.record_job_start_time()
    ctx = multiprocessing.get_context("fork")
    procs = _run([ctx.Process(target=mp_workers.record_with_inherited, args=(rec, N))
                  for _ in range(3)])
    assert rec.flush(30)
    events, _ = open_store(db).read("r9")
    children = collections.Counter(e.pid for e in events if e.pid != os.getpid())
    assert sorted(children) == sorted(p.pid for p in procs)
    assert set(children.values()) == {N}
    rec.close()


@pytest.mark.parametrize("method", METHODS)
def test_r9_pool_workers_keep_their_events(tmp_path, method):
    db = str(tmp_path / "r9.sqlite")
    ctx = multiprocessing.get_context(method)
    pool = ctx.Pool(3)
    try:
        pids = pool.map(mp_workers.pool_task, [(db, "r9", t, N) for t in range(8)])
    finally:
        pool.close()  # the normal end: workers finish and run their exit finalizers
        pool.join()
    events, _ = open_store(db).read("r9")
    per_task = collections.Counter(e.extra["metric_value"] for e in events)
    assert per_task == {float(t): N for t in range(8)}
    assert {e.pid for e in events} == set(pids)
