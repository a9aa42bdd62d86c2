"""A Calculator that reads nothing says so once, instead of a silent 0 %
(a new user's Calculator("my-run") without a store, or a typo in the run
name or the store path)."""

from __future__ import annotations

import logging

from goodput_core import Calculator, Recorder
from tests.support.fake_clock import FakeClock


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "goodput" and r.levelno == logging.WARNING]


def test_a_calculator_without_a_store_reads_the_recorders_default_store(caplog, monkeypatch,
                                                                        tmp_path):
    monkeypatch.setenv("GOODPUT_STORE", str(tmp_path / "default.sqlite"))
    calc = Calculator("my-run", clock=FakeClock(1010.0))
    with caplog.at_level(logging.WARNING, logger="goodput"):
        assert calc.refresh() == 0  # nothing recorded yet: no store file
        assert calc.refresh() == 0
    (message,) = _warnings(caplog)
    assert "default store" in message and "default.sqlite" in message
    clock = FakeClock(1000.0)
    rec = Recorder("my-run", clock=clock)  # no store: the default one
    rec.record_job_start_time()
    clock.advance(2.0)
    rec.record_step_start_time(7)
    assert rec.close(30)
    assert calc.refresh() == 2
    # what the recorder wrote: job start at 1000 (10 s before now), step 7
    result = calc.cumulative(1010.0)
    assert (result.total_seconds, result.last_step) == (10.0, 7)
    assert Calculator().refresh() == 0  # no run: nothing to read, said once


def test_a_run_name_or_store_path_with_a_typo_warns_once(caplog, tmp_path):
    url = f"sqlite:///{tmp_path}/runs.sqlite"
    clock = FakeClock(1000.0)
    rec = Recorder("my-run", url, clock=clock)
    rec.record_job_start_time()
    rec.record_step_start_time(0)
    assert rec.close(30)
    with caplog.at_level(logging.WARNING, logger="goodput"):
        assert Calculator("my-run", url, clock=clock).refresh() == 2  # no warning
        assert _warnings(caplog) == []
        typo = Calculator("my-rnu", url, clock=clock)
        assert typo.refresh() == 0 and typo.refresh() == 0
        (message,) = _warnings(caplog)
        assert "'my-rnu'" in message and "runs.sqlite" in message
        caplog.clear()
        elsewhere = Calculator("my-run", f"sqlite:///{tmp_path}/runz.sqlite", clock=clock)
        assert elsewhere.refresh() == 0
        (message,) = _warnings(caplog)
        assert "runz.sqlite" in message and "goodput runs --store" in message
