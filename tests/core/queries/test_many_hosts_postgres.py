"""A run written by many hosts on a real PostgreSQL server, read by columns
per writer (goodput_core/queries/many_hosts.py): random runs (as in
test_many_hosts.py) equal the per-event pass, read cold and in batches; real
host processes writing through pgbouncer give the hand-derived truth, and
the same figures read through pgbouncer and from the server."""

from __future__ import annotations

import multiprocessing as mp
import random
import uuid

import pytest

from goodput_core.queries.calculator import Calculator
from goodput_core.stores import open_store
from goodput_core.timeline.buckets import BadputType as B
from tests.support.many_host_runs import (
    RUN, deliveries, hosts_oracle, hosts_summary, oracle_calculator, random_run, real_host,
    summary)
from tests.support.pgbouncer_server import Pgbouncer, find_pgbouncer
from tests.support.postgres_server import skip_without_postgres

skip_without_postgres()


@pytest.fixture
def database(postgres_server, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    name = "t_" + uuid.uuid4().hex[:12]
    postgres_server.create_database(name)
    return name


def _renamed(writers, run):
    """The writers of another run (each run's writers are other processes: the
    store keeps one event per writer and sequence number)."""
    return [[e._replace(run=run, attempt=f"{run}-{e.attempt}") for e in w] for w in writers]


def _check(calc, events, now):
    events = [e._replace(run=RUN) for e in events]
    assert summary(calc, now) == summary(oracle_calculator(events), now)
    assert hosts_summary(calc.hosts(now=now)) == hosts_oracle(events, now)


def test_random_runs_equal_the_per_event_pass_cold_and_in_batches(postgres_server, database):
    url = postgres_server.url(database)
    store = open_store(url)
    try:
        for seed in range(24):
            rnd = random.Random(1000 + seed)
            run = f"run-{seed}"
            writers = _renamed(random_run(rnd), run)
            calc = Calculator(run, url) if seed % 2 else None
            batches = list(deliveries(rnd, writers))
            for i, batch in enumerate(batches):
                store.append(batch)
                if calc is not None and (rnd.random() < 0.3 or i == len(batches) - 1):
                    assert store.flush(60)
                    calc.refresh()
                    events, _ = store.read(run)
                    _check(calc, events, max(e.time for e in events) + 2.0)
            if calc is None:  # one cold read
                assert store.flush(60)
                calc = Calculator(run, url)
                calc.refresh()
                events, _ = store.read(run)
                _check(calc, events, max(e.time for e in events) + rnd.choice((0.5, 50.0)))
    finally:
        store.close()


T0 = real_host.T0
STEPS, STALL, SLOW = real_host.STEPS, real_host.STALL, real_host.SLOW


def test_real_hosts_writing_through_pgbouncer(postgres_server, database):
    if find_pgbouncer() is None:
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    bouncer = Pgbouncer(postgres_server)
    bouncer.start()
    try:
        via = bouncer.url(database)
        hosts = 4
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=real_host, args=(via, "bounced", i, hosts))
                 for i in range(hosts)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
            assert p.exitcode == 0
        now = T0 + 1000
        figures = []
        for url in (via, postgres_server.url(database)):
            calc = Calculator("bounced", url)
            calc.refresh()
            r = calc.cumulative(now=now)
            # the job waits for the slowest host's stall in every step: 0.15 s
            # (the last step closed by the job end: its span is the job's too)
            assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(STEPS * STALL * SLOW)
            assert r.total_seconds == pytest.approx(STEPS + 1.0)
            assert r.disruptions == 0 and r.skipped == {}
            b = calc.hosts(now=now)
            assert [o[:2] for o in b.outliers] == [(hosts - 1, "DATA_LOADING")]
            assert calc._feed.many.active and not calc._feed._by_records
            events, _ = open_store(url).read("bounced")
            _check(calc, [e._replace(run=RUN) for e in events], now)
            figures.append((summary(calc, now), hosts_summary(b)))
        assert figures[0] == figures[1]
    finally:
        bouncer.stop()
