"""Program goodput (MFU) and ML productivity goodput: the arithmetic, the
peak FLOP/s table, the productive step count and the Calculator query.

Expected numbers are computed by hand from the formula in
goodput_core/queries/program_goodput.py; times are small integers so sums are exact.
"""

from __future__ import annotations

import math

import pytest

import goodput_core.queries.program_goodput as pg
from goodput_core.queries.calculator import Calculator
from goodput_core.events import EventRecord, Kind as K

R = "run"


def ev(kind, t, step=None, **extra):
    return EventRecord(R, int(kind), float(t), step, extra or None)


def steps(times, first=0):
    return [ev(K.STEP_START, t, first + i) for i, t in enumerate(times)]


def meta(t=0.5, **fields):
    return ev(K.METADATA, t, **fields)


def calc_of(events, now=1000.0):
    calc = Calculator(clock=lambda: now)
    calc.add(events)
    return calc


# ----------------------------------------------------------- arithmetic
def test_mfu_formula():
    # 2e12 FLOPs per step at 3 steps/s on 4 devices of 1e13 FLOP/s: 6e12 / 4e13
    assert pg.mfu(2e12, 3.0, 1e13, 4) == pytest.approx(0.15)
    with pytest.raises(ValueError):
        pg.mfu(1.0, 1.0, 0.0, 1)
    with pytest.raises(ValueError):
        pg.mfu(1.0, 1.0, 1.0, 0)


@pytest.mark.parametrize("kind,peak", [
    ("TPU v6 lite", 918e12), ("TPU v5 lite", 197e12), ("TPU v5", 459e12),
    ("TPU v5p", 459e12), ("TPU v4", 275e12), ("TPU v3", 123e12), ("TPU v2", 45e12),
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12),
    ("NVIDIA H100 NVL", 835e12), ("NVIDIA H200", 989e12), ("NVIDIA A100-SXM4-80GB", 312e12),
    ("NVIDIA L4", 121e12),
    # unknown: CPUs, the v4i inference chip (not "TPU v4"), L40S (not "L4")
    ("cpu", None), ("TPU v4 lite", None), ("NVIDIA L40S", None), ("", None), (None, None),
])
def test_peak_table(kind, peak):
    assert pg.peak_flops_per_device(kind) == peak


def test_peak_table_is_overridable(monkeypatch):
    monkeypatch.setattr(pg, "_user_table", [])
    pg.register_peak_flops("b200", 2.25e15)
    pg.register_peak_flops("TPU v5 lite", 200e12)   # overrides the built-in entry
    assert pg.peak_flops_per_device("NVIDIA B200") == 2.25e15
    assert pg.peak_flops_per_device("TPU v5 lite") == 200e12
    assert pg.peak_flops_per_device("TPU v5 lite", table=[("tpu v5 lite", 1.0)]) == 1.0
    assert pg.peak_flops_per_device("TPU v4", table=[]) is None
    for bad in (("", 1.0), ("x", -1.0), ("x", math.nan), ("x", True)):
        with pytest.raises(ValueError):
            pg.register_peak_flops(*bad)


# ------------------------------------------------------ productive steps
def count(events, end=math.inf):
    calc = calc_of(events)
    return pg.productive_steps(calc.timeline, end)


def test_productive_steps_of_a_clean_run():
    # steps 0..9 at 10..19, the last closed by the job end: 10 steps
    events = [ev(K.JOB_START, 0), *steps(range(10, 20)), ev(K.JOB_END, 20)]
    assert count(events) == 10
    # spans ended by 15.5: steps 0..4 (step 5 is still running)
    assert count(events, 15.5) == 5


def test_productive_steps_leave_out_the_running_step_and_wasted_progress():
    # open attempt: the last step is still running
    assert count([ev(K.JOB_START, 0), *steps(range(1, 6))]) == 4
    # crash after steps 0..9, restart at step 5 (5..9 redone), then 5..7 and
    # a step end: kept 0..4 and 5..7
    events = [ev(K.JOB_START, 0), *steps(range(1, 11)), ev(K.JOB_START, 20),
              *steps([21, 22, 23], first=5), ev(K.STEP_END, 24, 7)]
    assert count(events) == 8


def test_productive_steps_with_sparse_logging():
    # steps logged every 5: spans [0,5) and [5,10) cover 5 steps each, step 10 ends
    events = [ev(K.JOB_START, 0), ev(K.STEP_START, 1, 0), ev(K.STEP_START, 6, 5),
              ev(K.STEP_START, 11, 10), ev(K.STEP_END, 12, 10)]
    assert count(events) == 11


# ------------------------------------------------------------ the query
def clean_run(first_step_seconds=1.0, **metadata):
    """Job [0, 20 + extra): steps 0..9 from t=10, 1 s each (step 0 may be longer)."""
    x = first_step_seconds - 1.0
    times = [10.0] + [11.0 + x + i for i in range(9)]
    return [ev(K.JOB_START, 0), meta(**metadata), *steps(times), ev(K.JOB_END, 20 + x)]


def test_program_goodput_from_metadata():
    calc = calc_of(clean_run(flops_per_step=2e12, peak_flops_per_device=1e12, num_devices=4))
    g = calc.program_goodput()
    # 10 productive steps in 10 s: 1 step/s; MFU = 2e12 / (1e12 · 4) = 0.5;
    # runtime goodput 10 / 20 = 0.5; ML productivity 0.25
    assert (g.productive_steps, g.productive_seconds, g.steps_per_second) == (10, 10.0, 1.0)
    assert g.mfu == pytest.approx(0.5)
    assert g.runtime_goodput == pytest.approx(0.5)
    assert g.ml_productivity_goodput == pytest.approx(0.25)
    assert (g.flops_per_step, g.peak_flops_per_device, g.num_devices) == (2e12, 1e12, 4)


def test_compilation_lowers_runtime_goodput_not_mfu():
    # step 0 takes 5 s: 4 s of it are program startup (rule 6), so the step
    # rate over productive time stays 1/s and MFU stays 0.5
    calc = calc_of(clean_run(5.0, flops_per_step=2e12, peak_flops_per_device=1e12,
                             num_devices=4))
    g = calc.program_goodput()
    assert g.productive_seconds == pytest.approx(10.0) and g.mfu == pytest.approx(0.5)
    assert g.runtime_goodput == pytest.approx(10 / 24)
    assert g.ml_productivity_goodput == pytest.approx(0.5 * 10 / 24)


def test_metadata_from_several_events_latest_wins_and_overrides():
    events = clean_run(device_kind="TPU v4", num_devices=8, flops_per_step=1e12)
    events += [meta(t=12.0, flops_per_step=1.1e15)]          # a later, better count
    calc = calc_of(events)
    g = calc.program_goodput()
    # peak from the table (TPU v4: 275e12); 1.1e15 / (275e12 · 8) = 0.5
    assert g.peak_flops_per_device == 275e12 and g.mfu == pytest.approx(0.5)
    assert calc.metadata()["flops_per_step"] == 1.1e15
    g = calc.program_goodput(peak_flops=1.1e14, num_devices=10, flops_per_step=5.5e14)
    assert g.mfu == pytest.approx(0.5)


def test_missing_or_bad_metadata_gives_none():
    assert calc_of(clean_run()).program_goodput() is None
    assert calc_of(clean_run(flops_per_step=1e12, num_devices=4)).program_goodput() is None
    assert calc_of(clean_run(flops_per_step=1e12, num_devices=4,
                             device_kind="cpu")).program_goodput() is None
    assert calc_of(clean_run(flops_per_step="many", peak_flops_per_device=1e12,
                             num_devices=4)).program_goodput() is None
    assert calc_of(clean_run(flops_per_step=1e12, peak_flops_per_device=1e12,
                             num_devices=True)).program_goodput() is None
    # metadata but no productive step yet
    calc = calc_of([ev(K.JOB_START, 0), meta(flops_per_step=1.0, peak_flops_per_device=1.0,
                                              num_devices=1), ev(K.STEP_START, 1, 0)], now=5.0)
    assert calc.program_goodput() is None
    assert Calculator().program_goodput() is None
