"""``--recorder_spec=run_group=G`` puts the AXLearn run in group G."""

from __future__ import annotations

from goodput_core import open_store
from goodput_core.queries.summaries import runs_in_group
from goodput_integrations import axlearn as gax


def test_run_group_key_is_recorded_with_the_run(flags, clock, run_name, store_url,
                                                 monkeypatch):
    monkeypatch.setattr(gax.GoodputSuiteRecorder, "_hook_clock", clock)
    monkeypatch.setattr(gax.GoodputSuiteRecorder, "_hook_process_index", 0)
    rec = gax.initialize(flags(run_group="ax-sweep", enable_monitoring="false"))
    rec.record(gax.Event.START_JOB)
    rec.record(gax.Event.END_JOB)
    assert rec.flush(10)
    assert [name for name, _ in runs_in_group(open_store(store_url), "ax-sweep")] == [run_name]
