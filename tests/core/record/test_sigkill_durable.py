"""docs/quality.md R17 / P14: an event whose ``record_*`` call returned survives a
SIGKILL of its process, on SQLite and on a real PostgreSQL server.

50 short-lived processes per store (5 at a time, into one store, one run
each) record in a tight loop and say each event after its call returned
(:mod:`tests.support.killed_recorder`); each is killed with SIGKILL after a
random number of lines, with a random writer interval, so the kills land
before the store opened, inside drains, inside transactions and between a
commit and the journal's header update. Processes started later adopt the
journals of those killed before (the next writer); a ``goodput runs``
command (any reader) delivers the rest. Then every event any process said
it recorded is stored exactly once, and nothing is left behind.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from goodput_core.stores import open_store
from tests.support.killed_recorder import ROOT, run_and_kill, stored_keys

# 50 processes, each paying an interpreter's start: ~30 s on a quiet machine, minutes when
# the machine is shared (the suite's 120 s per test is for single processes)
pytestmark = [pytest.mark.reliability, pytest.mark.timeout(600)]

KILLS = 50
AT_ONCE = 5


def _kill_many(store: str, spill: str, seed: int):
    env = dict(os.environ, GOODPUT_SPILL_DIR=spill, GOODPUT_HEARTBEAT_SECONDS="0")
    rng = random.Random(seed)
    plans = [(f"killed-{i}", rng.randint(1, 1500), rng.choice((0.005, 0.05, 0.2, 0.5)), i)
             for i in range(KILLS)]
    with ThreadPoolExecutor(AT_ONCE) as pool:
        results = list(pool.map(
            lambda p: run_and_kill(store, p[0], p[1], p[2], env, seed=p[3]), plans))
    assert [status for _, status in results] == [-signal.SIGKILL] * KILLS
    # Any reader delivers what the last ones left (nobody writes after them),
    # as much as it can in its time; the next reader goes on where it stopped.
    for _ in range(5):
        reader = subprocess.run([sys.executable, "-m", "goodput_core.cli", "runs", "--store",
                                 store], env=env, cwd=ROOT, capture_output=True, text=True,
                                timeout=300)
        assert reader.returncode == 0, reader.stderr
        if not os.listdir(spill):
            break
    return {name: said for (name, _, _, _), (said, _) in zip(plans, results)}


def _check(store, said_by_run, spill):
    lost = duplicated = 0
    seqs = collections.Counter()
    for run, said in said_by_run.items():
        events, _ = store.read(run)
        seqs.update((e.attempt, e.seq) for e in events)
        stored = collections.Counter(stored_keys(events))
        printed = set(said)
        lost += len(printed - set(stored))
        duplicated += sum(n - 1 for n in stored.values() if n > 1)
        # an event recorded but killed before it was said: at most the last one
        assert len(set(stored) - printed) <= 1, (run, sorted(set(stored) - printed))
    assert sum(map(len, said_by_run.values())) > 10 * KILLS  # the processes recorded
    assert (lost, duplicated) == (0, 0)
    assert [k for k, n in seqs.items() if n > 1] == []
    assert os.listdir(spill) == []  # every journal and spill file delivered and deleted


def test_sigkill_at_random_instants_loses_no_returned_event_sqlite(tmp_path):
    url = "sqlite:///" + str(tmp_path / "killed.sqlite").lstrip("/")
    spill = str(tmp_path / "spill")
    said = _kill_many(url, spill, seed=42_017)
    store = open_store(url)
    assert store.integrity_check()
    _check(store, said, spill)


def test_sigkill_at_random_instants_loses_no_returned_event_postgres(postgres_url, tmp_path):
    from tests.support.postgres_server import skip_without_postgres

    skip_without_postgres()
    spill = str(tmp_path / "spill")
    said = _kill_many(postgres_url, spill, seed=17_042)
    store = open_store(postgres_url)
    try:
        # what the last reader's store had not delivered at its exit waits in
        # that store's own spill file: this one delivers it first
        assert store.flush(120)
        _check(store, said, spill)
    finally:
        store.close()
