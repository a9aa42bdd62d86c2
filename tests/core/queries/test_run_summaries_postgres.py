"""Run summaries over a real PostgreSQL server: versions change with every
append, and a cached summary is served only while the run is unchanged."""

import pytest

from goodput_core.queries.summaries import run_summaries
from goodput_core.record.recorder import Recorder
from goodput_core.stores import open_store
from goodput_core.stores.summary_cache import SummaryCache
from tests.support.postgres_server import skip_without_postgres

skip_without_postgres()

from tests.core.queries.test_run_summaries import _ended  # noqa: E402


def test_versions_and_cached_summaries_on_postgres(postgres_url, tmp_path):  # noqa: F811
    store = open_store(postgres_url)
    try:
        for name, t0 in (("a", 0.0), ("b", 100.0)):
            rec = Recorder(name, store, strict=True, clock=lambda: 0.0)
            _ended(rec, t0)
            assert rec.flush(60)
        v1 = store.run_versions()
        assert list(v1) == ["a", "b"] and v1["b"] > v1["a"] > 0
        cache = SummaryCache(str(tmp_path / "s.sqlite"))
        first = {s.run: s for s in run_summaries(store, now=500.0, cache=cache)}
        assert first["a"].goodput == pytest.approx(100 * 5 / 6)  # 5 steps in a 6 s life
        again = {s.run: s for s in run_summaries(store, now=600.0, cache=cache)}
        assert again["b"].query_time == 500.0  # served from the cache: unchanged, ended
        rec = Recorder("b", store, strict=True, clock=lambda: 0.0)
        rec.record_job_start_time(110.0)
        rec.record_job_end_time(111.0)
        assert rec.flush(60)
        assert store.run_versions()["b"] > v1["b"]
        third = {s.run: s for s in run_summaries(store, now=700.0, cache=cache)}
        assert third["b"].query_time == 700.0  # changed: recomputed, never stale
        assert third["a"].query_time == 500.0
    finally:
        store.close()
