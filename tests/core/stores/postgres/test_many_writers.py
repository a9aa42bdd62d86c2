"""A run written by several writer processes at once, on a real server
(tests/core/conftest.py's fixtures): its chunks hold every writer's events
(a run's writers take turns on its lock, and packing follows), each job end
packs the run's rest, and a calculator reading it incrementally while they
write (many-writers mode: ``read()``'s records, built from the chunks) ends
with the figures of the whole run read at once.

The truth is the tables read with SQL (helpers postgres/test_chunks.py's helpers helpers).
"""

from __future__ import annotations

import os
import subprocess
import sys

from goodput_core.queries.calculator import Calculator
from goodput_core.stores.memory import MemoryStore
from goodput_core.stores.postgres import PostgresStore
from tests.core.stores.postgres.test_store import _events
from tests.core.stores.postgres.test_chunks import (
    ROOT, _WRITER, _check_chunks, _comparable, _same_reads_limits, _sql_records)
from tests.support.postgres_server import skip_without_postgres

skip_without_postgres()


def test_several_writer_processes_and_an_incremental_calculator(postgres_url, tmp_path):
    """3 writer processes, 303 events each (batches of 7, chunks of 16, the
    rest packed at each job end when 5 or more): the calculator refreshed
    while they write, then once more, has the figures of a calculator over
    the same events read once from the tables; an incremental ``read()``
    returns every event once, in id order; the chunks are the run's prefixes.
    3 events of a fourth writer come last, as rows after the last chunk."""
    # 909 events = 56 chunks + 13: if no earlier job end packed a rest, the
    # last one (the last batch of all) finds 13 >= 5 to pack, whatever the
    # order the writers took turns in (300 each left 4, and the test then
    # depended on where the earlier job ends fell)
    writers, n = 3, 303
    code = _WRITER.format(root=ROOT)
    children = [subprocess.Popen(
        [sys.executable, "-c", code, postgres_url, str(i), str(n), "5"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / f"c{i}")))
        for i in range(writers)]
    reader = PostgresStore(postgres_url, chunk_events=16)
    calc = Calculator("shared", reader)
    for c in children:
        c.stdin.write("go\n")
        c.stdin.flush()
    seen, cursor, refreshes = [], None, 0
    while any(c.poll() is None for c in children):
        calc.refresh()
        refreshes += 1
        records, cursor = reader.read("shared", since=cursor, limit=50)
        seen += records
    assert [c.stdout.readline().strip() for c in children] == ["done"] * writers
    assert [c.wait(timeout=60) for c in children] == [0] * writers
    late = PostgresStore(postgres_url, chunk_events=16)  # 3 rows after the last chunk
    late.append(_events("shared", 1, pid=2000, t0=1500.0))
    assert late.flush(30)
    late.close()
    calc.refresh()
    while True:
        records, cursor = reader.read("shared", since=cursor, limit=50)
        if not records:
            break
        seen += records
    truth = [r for _, r in _sql_records(postgres_url, "shared")]
    total = writers * n + 3
    assert len(truth) == total and len({(e.pid, e.seq) for e in truth}) == total
    assert [_comparable(e) for e in seen] == [_comparable(e) for e in truth]
    chunks = _check_chunks(postgres_url, "shared", 16, tails=5)
    assert any(c[2] < 16 for c in chunks)  # a job end packed a rest
    assert 3 <= total - sum(c[2] for c in chunks) < 8  # < 5 left by the last job end, + 3
    mem = MemoryStore()
    mem.append(truth)
    whole = Calculator("shared", mem)
    whole.refresh()
    got, want = calc.cumulative(now=5000.0), whole.cumulative(now=5000.0)
    assert calc._feed.many.active and refreshes > 1
    assert got.total_seconds > 0
    assert (got.goodput, got.total_seconds, got.badput_seconds) == \
        (want.goodput, want.total_seconds, want.badput_seconds)
    _same_reads_limits(reader, "shared")
    reader.close()
