"""Payloads read column-wise (goodput_core.timeline.payload_columns) give exactly what
parsing them one by one gives: the same numbers, the same skipped counts.

Batches of at least ``MIN_BATCH`` payloads take the column path; the same
payloads fed in small slices take the per-payload path (``from_payload``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput_core.queries.calculator import Calculator
from goodput_core.timeline.payload_columns import MIN_BATCH, payload_page

RUN = "job"
T0 = 1_700_000_000.0


def _job(n_steps: int):
    out = [{"job_name": RUN, "job_start_time": T0},
           {"job_name": RUN, "tpu_init_start_time": T0},
           {"job_name": RUN, "tpu_init_end_time": T0 + 5}]
    for i in range(n_steps):
        t = T0 + 10 + i
        out.append({"job_name": RUN, "step_count": i, "step_start_time": t})
        out.append({"job_name": RUN, "data_loading_start_time": t + 0.1})
        out.append({"job_name": RUN, "data_loading_end_time": t + 0.3})
        if i % 17 == 0:
            out.append({"job_name": RUN, "custom_badput_event_type": "eval",
                        "custom_badput_event_start_time": t + 0.4})
            out.append({"job_name": RUN, "custom_badput_event_type": "eval",
                        "custom_badput_event_end_time": t + 0.9})
    return out


ODD = [
    {"job_name": RUN, "step_count": 3.0, "step_start_time": T0 + 50.5},   # a double step
    {"job_name": RUN, "step_count": "4", "step_start_time": T0 + 51.5},   # a text step
    {"job_name": RUN, "step_count": -2, "step_start_time": T0 + 52.5},
    {"job_name": RUN, "step_count": True, "step_start_time": T0 + 52.7},
    {"job_name": RUN, "step_start_time": T0 + 53.5},                      # no step
    {"job_name": RUN, "step_count": 5, "step_start_time": math.nan},
    {"job_name": RUN, "step_count": 5, "step_start_time": True},
    {"job_name": RUN, "job_start_time": "soon"},
    {"job_name": "other", "step_count": 6, "step_start_time": T0 + 54.5},
    {"step_count": 7, "step_start_time": T0 + 55.5},                      # no job name
    {"job_name": RUN, "step_count": 8, "step_start_time": T0 + 56.5, "note": "x"},
    {"job_name": RUN, "job_end_time": T0 + 2e12},                         # out of range
    {"job_name": RUN, "disruption_cause": "preempted", "disruption_time": T0 + 60},
    {"job_name": RUN, "job_start_time": T0 + 70},
    {"job_name": RUN, "event_type": "save", "step": 9,
     "checkpoint_manager_blocking_start_time": T0 + 57,
     "checkpoint_manager_blocking_duration_secs": 0.4},
    {"job_name": RUN, "nothing": 1},
    {"job_name": RUN, "step_count": 10, "step_start_time": int(T0) + 58},  # an int time
    {"job_name": RUN, "step_count": 11, "step_start_time": 2 ** 1100},   # beyond a float
    {"job_name": RUN, "step_count": 12, "step_start_time": np.float64(T0 + 59.5)},
    {"job_name": RUN, "data_loading_start_time": None},
    ["not", "a", "dict"],
]
_odd = st.sampled_from(ODD)


def _same(a: Calculator, b: Calculator, now: float):
    ra, rb = a.cumulative(now), b.cumulative(now)
    assert ra.goodput == rb.goodput or (math.isnan(ra.goodput) and math.isnan(rb.goodput))
    assert ra.badput_seconds == rb.badput_seconds
    assert ra.custom_badput_seconds == rb.custom_badput_seconds
    assert (ra.disruptions, ra.max_productive_step, ra.last_step) == \
        (rb.disruptions, rb.max_productive_step, rb.last_step)
    assert a.skipped == b.skipped
    assert np.array_equal(a.step_stats().step_times, b.step_stats().step_times)


@settings(max_examples=40, deadline=None)
@given(n_steps=st.integers(MIN_BATCH // 3, 200), odd=st.lists(st.tuples(st.integers(0, 10 ** 6),
                                                                         _odd), max_size=12))
def test_column_path_equals_the_per_payload_path(n_steps, odd):
    payloads = _job(n_steps)
    for pos, payload in odd:
        payloads.insert(pos % (len(payloads) + 1), payload)
    columns, one_by_one = Calculator(RUN), Calculator(RUN)
    columns.add_payloads(payloads)
    for i in range(0, len(payloads), 50):  # below MIN_BATCH: parsed one by one
        one_by_one.add_payloads(payloads[i:i + 50])
    _same(columns, one_by_one, T0 + 10 ** 4)


@pytest.mark.parametrize("odd", ODD[:-1], ids=range(len(ODD) - 1))
def test_each_odd_payload_alone_among_many_is_judged_as_one_by_one(odd):
    # alone, so that no other odd value of its shape sends the shape down the
    # per-payload path and hides what the column path does with it
    payloads = _job(300)
    payloads.insert(101, odd)
    assert payload_page(payloads, RUN) is not None  # all dicts: the column path is taken
    columns, one_by_one = Calculator(RUN), Calculator(RUN)
    columns.add_payloads(payloads)
    for i in range(0, len(payloads), 50):
        one_by_one.add_payloads(payloads[i:i + 50])
    _same(columns, one_by_one, T0 + 10 ** 4)


def test_common_shapes_take_the_column_path():
    payloads = _job(400)
    page, skipped = payload_page(payloads, RUN)
    assert len(page) == len(payloads) and not skipped
    assert len(page.extra) == 2 * len(range(0, 400, 17))  # only the custom events keep dicts
    assert payload_page(payloads[:MIN_BATCH - 1], RUN) is None
    assert payload_page(payloads + [["not a dict"]], RUN) is None
