"""A duck-typed ``cloud_logger`` is read as the reference reads it, and no entry is lost.

The log's clock (the fake reader's "now", as Cloud Logging's) runs ahead of
the calculator's clock: the job's last entries are stamped after the query
time. Both calculators, ours and the installed reference, read the same log
side by side. Ground truth by construction: job start at 0, steps 0..5
every 10 s from 10, job end at 70: 60 s productive of 70 s.
"""

from __future__ import annotations

import tempfile

import pytest
from ml_goodput_measurement.src import goodput as ref_goodput

from goodput_core.compat import goodput as compat
from tests.support.compat_calculator import JOB, T0, p, steps
from tests.support.reference_harness import FakeCloudLogger, frozen_reference_clock

QUERY = T0 + 45  # the calculator's clock: before the last steps and the job end
NO_BOUNDS = {"start_time": None, "end_time": None, "last_entry_info": None}


def first_attempt():
    return [p(job_start_time=T0)] + steps(0, [T0 + 10 + 10 * i for i in range(6)]) + [
        p(job_end_time=T0 + 70)]


def second_attempt():
    """A restart from step 4 (stamped 80..120, after the first read)."""
    return [p(job_start_time=T0 + 80)] + steps(4, [T0 + 90, T0 + 100, T0 + 110]) + [
        p(job_end_time=T0 + 120)]


def log_with(payloads, log_now):
    fake = FakeCloudLogger(JOB, clock=lambda: log_now[0])
    for x in payloads:
        fake.append(x)
    return fake


def test_the_first_read_has_no_bounds_and_sees_entries_after_the_query_time():
    log_now = [T0 + 75]
    ours_log, ref_log = log_with(first_attempt(), log_now), log_with(first_attempt(), log_now)
    ours = compat.GoodputCalculator(JOB, "log", cloud_logger=ours_log, clock=lambda: QUERY)
    got = ours.get_job_goodput(True)
    with frozen_reference_clock(QUERY), tempfile.TemporaryDirectory() as cache:
        ref = ref_goodput.GoodputCalculator(JOB, "log", cloud_logger=ref_log, cache_dir=cache)
        want = ref.get_job_goodput(True)
        ref_total = ref.get_job_goodput_details()["total_elapsed_time"]
    assert ours_log.reads == ref_log.reads == [NO_BOUNDS]
    assert got[0] == pytest.approx(want[0], rel=1e-9) == pytest.approx(100 * 60 / 70)
    assert got[2] == want[2] == 5
    assert ours.get_job_goodput_details()["total_elapsed_time"] == ref_total == 70.0


def test_no_entry_is_lost_when_the_cursor_is_past_the_query_time():
    log_now = [T0 + 75]
    ours_log, ref_log = log_with(first_attempt(), log_now), log_with(first_attempt(), log_now)
    ours = compat.GoodputCalculator(JOB, "log", cloud_logger=ours_log, clock=lambda: QUERY)
    with tempfile.TemporaryDirectory() as cache:
        with frozen_reference_clock(QUERY):
            ref = ref_goodput.GoodputCalculator(JOB, "log", cloud_logger=ref_log, cache_dir=cache)
            ref_first = ref.get_job_goodput(True)
        first = ours.get_job_goodput(True)
        assert first[0] == pytest.approx(ref_first[0], rel=1e-9) and first[2] == ref_first[2]
        # The second attempt is logged; the calculators' clock has not moved.
        log_now[0] = T0 + 130
        for x in second_attempt():
            ours_log.append(x)
            ref_log.append(x)
        with frozen_reference_clock(QUERY):
            ref_second = ref.get_job_goodput(True)
    got = ours.get_job_goodput(True)
    # The reference skips the read (its cursor, T0 + 70, is after the query
    # time) and reports the first attempt only; we read the new entries.
    assert len(ref_log.reads) == 1 and ref_second == ref_first
    assert len(ours_log.reads) == 2
    assert ours_log.reads[1]["end_time"] is None
    assert ours_log.reads[1]["last_entry_info"][0].timestamp() == T0 + 70
    # Truth with both attempts (rule 1: the 10 s between them is idle):
    # attempt 1 keeps steps 0..3 (40 s), wastes steps 4..5 (20 s, rule 4);
    # attempt 2: steps 4..6 (30 s productive), 10 s before its first step.
    fresh_log = log_with(first_attempt() + second_attempt(), [T0 + 130])
    fresh = compat.GoodputCalculator(JOB, "log", cloud_logger=fresh_log, clock=lambda: QUERY)
    assert got == fresh.get_job_goodput(True)
    details = ours.get_job_goodput_details()
    assert details["total_elapsed_time"] == pytest.approx(110.0)
    assert got[0] == pytest.approx(100 * 70 / 110)
    assert got[2] == 6
