"""A naive datetime is local time, everywhere, in every time zone (events.md).

The same script (``tests/support/tz_job.py``: record with naive datetimes, query
the native and compat calculators with naive bounds and exclusions, run
``goodput report --window/--exclude`` with naive ISO times, and run the
installed reference on the same calls) runs in subprocesses under several
``TZ`` values; every number must be the same and equal to the job's true
durations, which are derived by hand below.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import subprocess
import sys

import pytest

from goodput_core import Recorder
from goodput_core.events import to_timestamp
from goodput_core.stores.memory import MemoryStore
from goodput_core.timespec import parse_time
from goodput_core.zone_offset import zone_offset_hours
from tests.support.fake_clock import FakeClock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# UTC, a negative whole-hour zone with DST, +5:30 and +12:45/+13:45.
ZONES = ["UTC", "America/Los_Angeles", "Asia/Kolkata", "Pacific/Chatham"]

# The job of tz_job.py, by hand. Steps 1..8 span 10 s each, except step 5's
# span, which loses the 4 s "eval" event: mean 76/8 = 9.5 s, so the first
# step's 10 s has a 0.5 s program-startup excess (rule 6). Productive:
# 100 s of step spans - 4 s eval - 0.5 s startup = 95.5 s of 125 s.
CUMULATIVE = [100 * 95.5 / 125, 125.0, 95.5, 9]
# [30, 90]: step spans only, minus the eval event: 56 of 60 s.
WINDOW = [100 * 56 / 60, 60.0]
# Excluding [40, 50] (10 s of step 1..2 time) from the whole job.
EXCLUSION = [100 * 85.5 / 115, 115.0, 10.0]
# The CLI combines the window and the exclusion: 46 of 50 s.
CLI = [0, 100 * 46 / 50, 50.0, 10.0]


def _run_under(tz: str, tmp_path) -> dict:
    directory = tmp_path / tz.replace("/", "_")
    directory.mkdir()
    env = dict(os.environ, TZ=tz, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "tests.support.tz_job", str(directory)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def by_zone(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tz")
    return {tz: _run_under(tz, tmp) for tz in ZONES}


def test_the_zones_are_really_different(by_zone):
    offsets = {tz: out["utc_offset_hours"] for tz, out in by_zone.items()}
    assert offsets["UTC"] == 0.0
    assert offsets["America/Los_Angeles"] in (-8.0, -7.0)
    assert offsets["Asia/Kolkata"] == 5.5
    assert offsets["Pacific/Chatham"] in (12.75, 13.75)


@pytest.mark.parametrize("tz", ZONES)
def test_naive_datetimes_give_the_true_numbers_in_every_zone(by_zone, tz):
    got = by_zone[tz]["ours"]
    assert got["cumulative"] == pytest.approx(CUMULATIVE, rel=1e-9)
    assert got["window"] == pytest.approx(WINDOW, rel=1e-9)
    assert got["exclusion"] == pytest.approx(EXCLUSION, rel=1e-9)
    assert got["compat"] == pytest.approx(
        [CUMULATIVE[0], 9, WINDOW[0], WINDOW[1], EXCLUSION[0], EXCLUSION[2]], rel=1e-9)
    assert got["cli"] == pytest.approx(CLI, rel=1e-9)
    assert got == by_zone["UTC"]["ours"]


@pytest.mark.parametrize("tz", ZONES)
def test_the_reference_agrees_on_the_same_naive_calls(by_zone, tz):
    ref = by_zone[tz]["reference"]["cumulative"]
    assert ref == pytest.approx([CUMULATIVE[0], CUMULATIVE[1], CUMULATIVE[3]], rel=1e-6)


@pytest.mark.parametrize("tz", ZONES)
def test_utcnow_is_warned_about_once_off_utc(by_zone, tz):
    out = by_zone[tz]
    warnings = out["utcnow_warnings"]
    if out["utc_offset_hours"] == 0.0:
        assert warnings == []
    else:
        # utcnow() read as local time lands -offset away from the clock
        assert len(warnings) == 1
        assert f"{-out['utc_offset_hours']:+g} h" in warnings[0]


# ------------------------------------------------------------ in process
def test_naive_datetime_is_local_time():
    naive = dt.datetime(2024, 5, 1, 12, 0, 0)
    assert to_timestamp(naive) == naive.astimezone().timestamp()
    aware = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert to_timestamp(aware) == 1714557600.0
    assert parse_time("2024-05-01T12:00:00") == naive.astimezone().timestamp()
    assert parse_time("2024-05-01T10:00:00Z") == 1714557600.0
    assert parse_time("2024-05-01T12:00:00+02:00") == 1714557600.0


@pytest.mark.parametrize("offset_s,hours", [
    (8 * 3600, 8.0), (-5.5 * 3600, -5.5), (12.75 * 3600 + 20, 12.75), (-14 * 3600, -14.0),
    (3600 - 45, 1.0),
])
def test_zone_offsets_are_recognised(offset_s, hours):
    assert zone_offset_hours(1e9 + offset_s, 1e9) == hours


@pytest.mark.parametrize("offset_s", [
    0, 25 * 60, 29 * 60, 2 * 3600 + 7 * 60, 3600 + 300, 15 * 3600, -(14 * 3600 + 120), 30 * 86400,
])
def test_other_offsets_are_not_zone_offsets(offset_s):
    assert zone_offset_hours(1e9 + offset_s, 1e9) is None


def test_a_zone_shift_is_warned_once_per_recorder_and_kept(caplog):
    store = MemoryStore()
    clock = FakeClock(1_700_000_000.0)
    shifted = dt.datetime.fromtimestamp(clock.t + 8 * 3600)  # naive, 8 h ahead
    with caplog.at_level(logging.WARNING, logger="goodput"):
        rec = Recorder("run", store, clock=clock, strict=True)
        rec.record_job_start_time(shifted)
        rec.record_step_start_time(0, shifted)
        rec.record_step_start_time(1, clock.t - 3 * 3600)
        other = Recorder("other", store, clock=clock, strict=True)
        other.record_job_start_time(clock.t + 40 * 60)  # 40 min: not a zone offset
        other.record_job_start_time(clock.t - 5.5 * 3600)
    assert rec.flush(5) and other.flush(5)
    msgs = [r.getMessage() for r in caplog.records if "time-zone offset" in r.getMessage()]
    assert len(msgs) == 2
    assert "'run'" in msgs[0] and "+8 h" in msgs[0]
    assert "'other'" in msgs[1] and "-5.5 h" in msgs[1]
    assert [e.time for e in store.read("run")[0]] == [
        clock.t + 8 * 3600, clock.t + 8 * 3600, clock.t - 3 * 3600]


def test_times_near_the_clock_are_not_warned_about(caplog):
    clock = FakeClock(1_700_000_000.0)
    with caplog.at_level(logging.WARNING, logger="goodput"):
        rec = Recorder("run", MemoryStore(), clock=clock, strict=True)
        rec.record_job_start_time(dt.datetime.fromtimestamp(clock.t + 5))  # naive local
        rec.record_step_start_time(0)
        rec.record_step_start_time(1, clock.t - 60)
    rec.close()
    assert not [r for r in caplog.records if "time-zone offset" in r.getMessage()]
