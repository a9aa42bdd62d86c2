"""Loads through the native API block unless said otherwise (docs/semantics.md,
"Loads"): the README's loop, synchronous, reports its loads as sync loading;
``overlapped=True`` as overlapped; the reference's methods keep the positional
rule; the report says how many seconds were counted blocking by default."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from goodput_core import Calculator, Recorder
from goodput_core.compat.goodput import GoodputRecorder
from goodput_core.timeline.buckets import BadputType as B
from tests.support.fake_clock import FakeClock

T0 = 1_700_000_000.0
STEPS, LOAD, COMPUTE = 60, 0.05, 0.1


def _readme_loop(store, run, **load_kwargs):
    """The README's loop ("Your own loop"), synchronous: each step loads a
    batch (0.05 s, nothing else runs meanwhile) then computes (0.1 s)."""
    clock = FakeClock(T0)
    rec = Recorder(run, store, clock=clock, hang_detection=False)
    with rec.job():
        for step in range(STEPS):
            with rec.step(step):
                with rec.data_loading(**load_kwargs):
                    clock.advance(LOAD)
                clock.advance(COMPUTE)
    rec.close()
    calc = Calculator(run, store, clock=clock)
    calc.refresh()
    return calc, calc.cumulative()


def test_readme_loop_reports_its_loads_as_sync_loading(tmp_path):
    store = f"sqlite:///{tmp_path / 'loop.sqlite'}"
    calc, r = _readme_loop(store, "sync")
    # 60 loads of 0.05 s, all waited for: 3.0 s of sync loading, none overlapped
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(STEPS * LOAD, rel=0.10)
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(3.0)
    assert r.data_loading_async_seconds == 0.0
    assert r.productive_seconds == pytest.approx(STEPS * COMPUTE)
    assert calc.blocking_load_seconds() == pytest.approx(3.0)


def test_overlapped_loads_are_reported_as_overlapped(tmp_path):
    store = f"sqlite:///{tmp_path / 'loop.sqlite'}"
    calc, r = _readme_loop(store, "prefetch", overlapped=True)
    # positional rule: every load lies in a step span: overlapped, productive
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == 0.0
    assert r.data_loading_async_seconds == pytest.approx(3.0)
    assert r.productive_seconds == pytest.approx(STEPS * (LOAD + COMPUTE))
    assert calc.blocking_load_seconds() == 0.0


def test_reference_methods_keep_the_positional_rule(tmp_path):
    store = f"sqlite:///{tmp_path / 'ref.sqlite'}"
    clock = FakeClock(T0)
    rec = GoodputRecorder("ref", "ref-logger", True, store=store, clock=clock)
    rec.record_job_start_time()
    for step in range(STEPS):
        rec.record_step_start_time(step)
        rec.record_data_loading_start_time()
        clock.advance(LOAD)
        rec.record_data_loading_end_time()
        clock.advance(COMPUTE)
    rec.record_job_end_time()
    rec.close()
    calc = Calculator("ref", store)
    calc.refresh()
    r = calc.cumulative()
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == 0.0
    assert r.data_loading_async_seconds == pytest.approx(3.0)


def test_report_says_what_was_counted_blocking_by_default(tmp_path):
    store = f"sqlite:///{tmp_path / 'loop.sqlite'}"
    _readme_loop(store, "sync")
    cmd = [sys.executable, "-m", "goodput_core.cli", "report", "sync", "--store", store]
    rep = json.loads(subprocess.run(cmd + ["--json"], capture_output=True, text=True,
                                    check=True).stdout)
    assert rep["data_loading_blocking_default"]["seconds"] == pytest.approx(3.0)
    assert "overlapped=True" in rep["data_loading_blocking_default"]["how_to_change"]
    table = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "3.000 s counted blocking by default" in table
    assert "rec.data_loading(overlapped=True)" in table


def test_the_seconds_counted_blocking_by_default_are_clipped_to_the_reports_window(tmp_path):
    """The report over a window says the blocking seconds inside that window: the
    last 1.475 s of the README loop (it ended at 9 s: [7.525, 9]) hold the second
    half of step 50's load ([7.5, 7.55)) and the loads of steps 51-59: 0.025 + 9 x
    0.05 = 0.475 s, not the run's 3 s."""
    store = f"sqlite:///{tmp_path / 'loop.sqlite'}"
    _readme_loop(store, "sync")
    cmd = [sys.executable, "-m", "goodput_core.cli", "report", "sync", "--store", store,
           "--window", "1.475s"]
    rep = json.loads(subprocess.run(cmd + ["--json"], capture_output=True, text=True,
                                    check=True).stdout)
    assert rep["window"]["start"] == pytest.approx(T0 + 7.525)
    assert rep["data_loading_blocking_default"]["seconds"] == pytest.approx(0.475, abs=1e-5)
    assert rep["badput_seconds"]["DATA_LOADING_SYNC"] == pytest.approx(0.475, abs=1e-5)
    table = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "0.475 s counted blocking by default" in table


def _readme_block(heading: str, page: str = "README.md") -> str:
    """The first ```python block under ``heading`` in ``page`` (README.md, or a
    page under docs/)."""
    import os
    import re

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    with open(os.path.join(root, page), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index(heading):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.parametrize("page,heading", [("README.md", "## Your own loop"),
                                          ("docs/recording.md", "## The recorder")])
def test_the_readme_loop_as_written_leaves_nothing_unexplained(tmp_path, page, heading):
    """The README's own loop ("Your own loop"), and the longer one that opens
    docs/recording.md, run as written with a fake clock and stand-ins for the
    model (accelerator init 2 s where the loop has one, building the state 3 s,
    the data pipeline 1.5 s, 2,001 steps of a 0.01 s load and 0.1 s of compute,
    an evaluation of 0.5 s every 1,000 steps where the loop has one): every
    second is attributed, OTHER is 0 (the pipeline is built inside the
    preparation block)."""
    import types

    code = _readme_block(heading, page)
    made = 'rec = Recorder("my-run")'
    assert made in code
    clock = FakeClock(T0)
    store = f"sqlite:///{tmp_path / 'readme.sqlite'}"

    def batches():
        while True:
            clock.advance(0.01)
            yield 1

    def step(state, batch):
        clock.advance(0.1)
        return state

    def make_batches():
        clock.advance(1.5)
        return batches()

    def make_state():  # the README's: (state, start step, batches) in one call
        clock.advance(3.0)
        return 0, 0, make_batches()

    names = {
        "jax": types.SimpleNamespace(devices=lambda: clock.advance(2.0) or ["cpu"]),
        "make_state": make_state, "make_batches": make_batches,
        "train_step": step, "evaluate": lambda state: clock.advance(0.5),
        "num_steps": 2001,
    }
    if "make_batches()" in code:  # docs/recording.md's: (state, start step), then batches
        names["make_state"] = lambda: (clock.advance(3.0), 0)
    init = 2.0 if "rec.tpu_init()" in code else 0.0
    evals = 1.5 if "custom_badput_event(\"eval\")" in code else 0.0
    exec(code.replace(made, 'rec = Recorder("my-run", STORE, clock=CLOCK)'),
         {**names, "STORE": store, "CLOCK": clock})
    calc = Calculator("my-run", store, clock=clock)
    r = calc.cumulative()
    assert r.badput_seconds[B.OTHER] == 0.0
    assert r.badput_seconds[B.TPU_INITIALIZATION] == pytest.approx(init)
    assert r.badput_seconds[B.TRAINING_PREP] == pytest.approx(4.5)
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(2001 * 0.01, rel=1e-6)
    assert r.custom_badput_seconds == ({"EVAL": pytest.approx(evals)} if evals else {})
    assert r.total_seconds == pytest.approx(init + 4.5 + 2001 * 0.11 + evals, abs=1e-3)
    assert r.productive_seconds == pytest.approx(2001 * 0.1, rel=1e-6)
