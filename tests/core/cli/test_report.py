"""``goodput report`` and the time syntax of :mod:`goodput_core.cli.timespec`.

The run under test is :mod:`goodput_core.cli.synthetic`'s job, recorded into a
sqlite store in ``tmp_path`` with non-default phase durations (so that no
two buckets share a value by accident). Every expected number is derived
from the job's fields and semantics.md, never from the command's output.
"""

from __future__ import annotations

import datetime as dt
import json
import math

import pytest

from goodput_core.timeline.buckets import BASE_BADPUT, BadputType
from goodput_core.cli import main
from goodput_core.record.recorder import Recorder
from goodput_core.cli.synthetic import SyntheticJob, record_synthetic_job
from goodput_core.cli.timespec import (
    TimeSpecError,
    format_duration,
    format_time,
    parse_duration,
    parse_interval,
    parse_time,
    parse_window,
)

START = 1_700_000_000.0   # 2023-11-14T22:13:20Z
TOL = 1e-5                # the store keeps times to ~1e-7 s at this epoch
JOB = SyntheticJob(tpu_init=7.0, training_prep=2.5, compile_excess=3.0, step=2.0,
                   data_loading=0.25, checkpoint_every=5, checkpoint_save=0.75,
                   eval_at_step=12, eval_time=1.5, steps=30, crash_at_step=23,
                   recovery_gap=13.0)


def _expected(job: SyntheticJob):
    """Bucket seconds of the synthetic job, from its definition and semantics.md.

    Attempt 1 runs steps 0..crash and dies at the end of step ``crash``;
    attempt 2 restarts from the last checkpoint ``r`` and runs r..steps-1.
    """
    r = (job.crash_at_step // job.checkpoint_every) * job.checkpoint_every
    assert job.eval_at_step < r, "the eval must happen once, in kept progress"
    # saves happen after step k when (k+1) is a multiple of checkpoint_every;
    # attempt 1 saves at multiples in [1, crash] (all before r: kept, rule 4)
    saves1 = job.crash_at_step // job.checkpoint_every
    saves2 = job.steps // job.checkpoint_every - r // job.checkpoint_every
    prep = job.tpu_init + job.training_prep + job.data_loading
    a1 = (prep + (job.crash_at_step + 1) * job.step + job.compile_excess
          + job.eval_time + saves1 * job.checkpoint_save)
    a2 = prep + (job.steps - r) * job.step + job.compile_excess + saves2 * job.checkpoint_save
    buckets = {
        "TPU_INITIALIZATION": 2 * job.tpu_init,
        "TRAINING_PREP": 2 * job.training_prep,
        # rule 6: the first step's excess over the others (one per attempt)
        "PROGRAM_STARTUP": 2 * job.compile_excess,
        "DATA_LOADING_SYNC": 2 * job.data_loading,
        "DATA_LOADING_ASYNC": 0.0,
        "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": (saves1 + saves2) * job.checkpoint_save,
        "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": 0.0,
        # rule 4: steps r..crash of attempt 1 were redone (the crashed step too)
        "WASTED_PROGRESS_FROM_DISRUPTION": (job.crash_at_step - r + 1) * job.step,
        "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": job.recovery_gap,
        "CUSTOM_BADPUT_EVENTS": job.eval_time,
        "OTHER": 0.0,
    }
    productive = job.steps * job.step  # every step kept once, its excess carved out
    return {"r": r, "a1": a1, "a2": a2, "buckets": buckets, "productive": productive,
            "total": a1 + job.recovery_gap + a2}


EXP = _expected(JOB)
JSON_KEYS = {
    "run", "store", "query_time", "lifetime", "window", "exclude", "goodput_percent",
    "productive_seconds", "total_seconds", "idle_seconds", "excluded_seconds",
    "badput_seconds", "badput_percent", "custom_badput_seconds", "custom_badput_percent",
    "data_loading_async_seconds", "data_loading_async_percent",
    "data_loading_blocking_default", "disruptions",
    "max_productive_step", "last_step", "step_time", "skipped", "program_goodput",
    "program_goodput_unusable", "slice_efficiency", "metrics", "insights",
    "scheduling_seconds", "lifecycle", "incidents", "state", "checkpoint_save_storage",
}


@pytest.fixture
def store(tmp_path):
    """A sqlite store holding run 'syn' (the synthetic job) and 'nostart'."""
    url = f"sqlite:///{tmp_path / 'goodput.sqlite'}"
    rec = Recorder("syn", url)
    played = record_synthetic_job(rec, START, JOB)
    assert rec.flush(10)
    rec.close()
    # a run with events but no job start: nothing to measure
    rec = Recorder("nostart", url)
    rec.record_step_start_time(1, START)
    assert rec.flush(10)
    rec.close()
    assert played["end"] - START == pytest.approx(EXP["total"], abs=TOL)
    assert played["restart_step"] == EXP["r"]
    return url


def report_json(capsys, store, *extra):
    assert main(["report", "syn", "--store", store, "--json", *extra]) == 0
    out = capsys.readouterr().out

    def no_nan(name):
        raise AssertionError(f"non-JSON constant {name} in the output")

    return json.loads(out, parse_constant=no_nan)


# ----------------------------------------------------------------- report
def test_json_numbers_match_the_synthetic_job(capsys, store):
    rep = report_json(capsys, store)
    assert set(rep) == JSON_KEYS
    assert rep["run"] == "syn"
    assert rep["total_seconds"] == pytest.approx(EXP["total"], abs=TOL)
    assert rep["productive_seconds"] == pytest.approx(EXP["productive"], abs=TOL)
    assert rep["goodput_percent"] == pytest.approx(100 * EXP["productive"] / EXP["total"],
                                                   rel=1e-6)
    partition = {k: v for k, v in EXP["buckets"].items() if k != "DATA_LOADING_ASYNC"}
    assert list(rep["badput_seconds"]) == [
        b.name for b in BASE_BADPUT if b is not BadputType.DATA_LOADING_ASYNC]
    assert rep["badput_seconds"] == pytest.approx(partition, abs=TOL)
    assert rep["badput_percent"] == pytest.approx(
        {k: 100 * v / EXP["total"] for k, v in partition.items()}, abs=1e-4)
    assert rep["custom_badput_seconds"] == pytest.approx({"EVAL": JOB.eval_time}, abs=TOL)
    assert rep["idle_seconds"] == 0 and rep["excluded_seconds"] == 0
    assert rep["data_loading_async_seconds"] == pytest.approx(0, abs=TOL)
    assert rep["disruptions"] == 1
    assert rep["max_productive_step"] == rep["last_step"] == JOB.steps - 1
    assert rep["lifetime"]["start"] == START
    assert rep["lifetime"]["start_iso"] == "2023-11-14T22:13:20Z"
    assert rep["lifetime"]["seconds"] == pytest.approx(EXP["total"], abs=TOL)
    assert rep["window"]["spec"] is None and rep["exclude"] == [] and rep["skipped"] == {}
    # most steps take exactly `step`: the median and the ideal (rule 12) are that
    st = rep["step_time"]
    assert set(st) == {"steps_measured", "ideal_seconds", "median_seconds", "p90_seconds",
                       "deviation_aggregate_seconds"}
    assert st["ideal_seconds"] == pytest.approx(JOB.step, abs=TOL)
    assert st["median_seconds"] == pytest.approx(JOB.step, abs=TOL)
    assert st["p90_seconds"] >= st["median_seconds"]
    assert st["deviation_aggregate_seconds"] > 0
    assert JOB.steps - 1 <= st["steps_measured"] <= JOB.steps


def test_partition_adds_up(capsys, store):
    rep = report_json(capsys, store)
    parts = sum(rep["badput_seconds"].values())
    assert rep["productive_seconds"] + parts == pytest.approx(rep["total_seconds"], abs=TOL)


def test_relative_window_ends_at_the_run_end(capsys, store):
    # the last (attempt 2 + half the recovery gap): half the gap, then attempt 2
    w = EXP["a2"] + JOB.recovery_gap / 2
    rep = report_json(capsys, store, "--window", f"{w}s")
    b = rep["badput_seconds"]
    assert rep["total_seconds"] == pytest.approx(w, abs=TOL)
    assert rep["window"]["end"] == pytest.approx(START + EXP["total"], abs=TOL)
    assert b["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] == pytest.approx(JOB.recovery_gap / 2,
                                                                         abs=TOL)
    assert b["TPU_INITIALIZATION"] == pytest.approx(JOB.tpu_init, abs=TOL)
    assert b["PROGRAM_STARTUP"] == pytest.approx(JOB.compile_excess, abs=TOL)
    assert b["WASTED_PROGRESS_FROM_DISRUPTION"] == pytest.approx(0, abs=TOL)
    assert b["CUSTOM_BADPUT_EVENTS"] == pytest.approx(0, abs=TOL)
    assert rep["productive_seconds"] == pytest.approx((JOB.steps - EXP["r"]) * JOB.step, abs=TOL)
    assert rep["disruptions"] == 1  # the restart segment begins inside the window


def test_absolute_window_iso_and_posix(capsys, store):
    # attempt 1 exactly: from its start (ISO, naive = local time) to the crash (POSIX seconds)
    crash = START + EXP["a1"]
    naive_start = dt.datetime.fromtimestamp(START).isoformat()
    rep = report_json(capsys, store, "--window", f"{naive_start}/{crash!r}")
    b = rep["badput_seconds"]
    r = EXP["r"]
    assert rep["total_seconds"] == pytest.approx(EXP["a1"], abs=TOL)
    assert rep["productive_seconds"] == pytest.approx(r * JOB.step, abs=TOL)
    assert b["WASTED_PROGRESS_FROM_DISRUPTION"] == pytest.approx(
        EXP["buckets"]["WASTED_PROGRESS_FROM_DISRUPTION"], abs=TOL)
    assert b["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] == pytest.approx(0, abs=TOL)
    assert b["TPU_INITIALIZATION"] == pytest.approx(JOB.tpu_init, abs=TOL)
    assert rep["disruptions"] == 0
    assert rep["window"]["start_iso"] == "2023-11-14T22:13:20Z"


def test_exclude_removes_the_recovery_gap(capsys, store):
    crash = START + EXP["a1"]
    back = crash + JOB.recovery_gap
    iso = dt.datetime.fromtimestamp(crash + JOB.recovery_gap / 2, dt.timezone.utc)
    # two overlapping exclusions: their union is the gap (counted once)
    rep = report_json(capsys, store, "--exclude", f"{crash!r}/{back!r}",
                      "--exclude", iso.strftime("%Y-%m-%dT%H:%M:%S.%fZ") + f"/{back!r}")
    total = EXP["total"] - JOB.recovery_gap
    assert rep["excluded_seconds"] == pytest.approx(JOB.recovery_gap, abs=TOL)
    assert rep["total_seconds"] == pytest.approx(total, abs=TOL)
    assert rep["badput_seconds"]["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] == pytest.approx(
        0, abs=TOL)
    assert rep["goodput_percent"] == pytest.approx(100 * EXP["productive"] / total, rel=1e-6)
    assert len(rep["exclude"]) == 2


def test_run_without_job_start_gives_nulls_not_nan(capsys, store):
    assert main(["report", "nostart", "--store", store, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(c))
    assert set(rep) == JSON_KEYS
    assert rep["lifetime"]["start"] is None and rep["window"]["end"] is None
    assert rep["total_seconds"] == 0 and rep["goodput_percent"] == 0
    assert rep["step_time"]["ideal_seconds"] is None
    assert list(rep["badput_seconds"]) == [
        b.name for b in BASE_BADPUT if b is not BadputType.DATA_LOADING_ASYNC]
    assert main(["report", "nostart", "--store", store]) == 0
    assert "no job start" in capsys.readouterr().out


def test_table_for_people(capsys, store):
    assert main(["report", "syn", "--store", store]) == 0
    out = capsys.readouterr().out
    for b in BASE_BADPUT:
        assert b.name in out
    assert "EVAL" in out and "PRODUCTIVE" in out
    assert "2023-11-14T22:13:20Z" in out
    assert f"{100 * EXP['productive'] / EXP['total']:.2f} %" in out
    assert format_duration(EXP["total"]) in out  # "1m 57s" beside the seconds
    assert f"max productive step      {JOB.steps - 1}" in out
    assert "Skipped inputs: none" in out


@pytest.mark.parametrize("argv, needle", [
    (["report", "missing"], "no run named 'missing'"),
    (["report", "syn", "--window", "5x"], "bad --window"),
    (["report", "syn", "--window", "2023-13-45/1h"], "bad --window"),
    (["report", "syn", "--window", "1h/2h"], "two durations"),
    (["report", "syn", "--exclude", "1700000010/1700000005"], "ends before it starts"),
    (["report", "syn", "--exclude", "1h"], "bad --exclude"),
])
def test_errors_are_one_line_and_exit_2(capsys, store, argv, needle):
    assert main(argv + ["--store", store]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err.count("\n") == 1 and cap.err.startswith("goodput report: error: ")
    assert needle in cap.err


def test_unreadable_store_is_one_line(capsys, tmp_path):
    bad = tmp_path / "garbage.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    assert main(["report", "syn", "--store", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("goodput report: error: ")


# --------------------------------------------------------------- timespec
@pytest.mark.parametrize("text, seconds", [
    ("30s", 30), ("15m", 900), ("1h", 3600), ("2d", 172800), ("1w", 604800),
    ("250ms", 0.25), ("1h30m", 5400), ("1h 30m 15s", 5415), ("1.5h", 5400), ("90", 90),
    (" 2M ", 120), ("0", 0), (".5s", 0.5),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "-5s", "-5", "5x", "h", "1h-30m", "nan", "inf", "1e400",
                                  "s30"])
def test_parse_duration_rejects(text):
    with pytest.raises(TimeSpecError):
        parse_duration(text)


@pytest.mark.parametrize("text, t", [
    ("2023-11-14T22:13:20", dt.datetime(2023, 11, 14, 22, 13, 20).timestamp()),  # local
    ("2023-11-14T22:13:20Z", START),
    ("2023-11-14T22:13:20z", START),
    ("2023-11-14T23:13:20+01:00", START),
    ("2023-11-14 22:13:20.5Z", START + 0.5),
    ("2023-11-14", dt.datetime(2023, 11, 14).timestamp()),  # local midnight
    ("1700000000", START), ("1700000000.25", START + 0.25), ("1.7e9", START),
])
def test_parse_time(text, t):
    assert parse_time(text) == pytest.approx(t, abs=1e-6)


@pytest.mark.parametrize("text", ["", "yesterday", "2023-13-01", "1h", "nan", "12:00:00Z"])
def test_parse_time_rejects(text):
    with pytest.raises(TimeSpecError):
        parse_time(text)


def test_parse_interval_and_window():
    assert parse_interval("1700000000/1700000060") == (START, START + 60)
    assert parse_interval("2023-11-14T22:13:20Z/1h") == (START, START + 3600)
    assert parse_interval("30m/2023-11-14T22:13:20Z") == (START - 1800, START)
    for bad in ("1700000060/1700000000", "5", "a/b", "/5", "5/", "1/2/3", "1h/30m"):
        with pytest.raises(TimeSpecError):
            parse_interval(bad)
    w = parse_window("15m")
    assert w.relative and w.duration == 900 and w.resolve(START) == (START - 900, START)
    w = parse_window("1700000000/1700000060")
    assert not w.relative and w.resolve(0.0) == (START, START + 60)
    with pytest.raises(TimeSpecError, match="window"):
        parse_window("soon")
    assert issubclass(TimeSpecError, ValueError)


@pytest.mark.parametrize("seconds, text", [
    (0.25, "0.25s"), (42, "42.0s"), (59.96, "1m 00s"), (185, "3m 05s"),
    (3723, "1h 02m 03s"), (2 * 86400 + 3600, "2d 01h 00m 00s"), (-90, "-1m 30s"),
    (math.nan, "-"), (math.inf, "-"),
])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_format_time():
    assert format_time(START) == "2023-11-14T22:13:20Z"
    assert format_time(START + 83.6999998) == "2023-11-14T22:14:43.700Z"
    assert format_time(math.nan) is None and format_time(None) is None


def test_insights_in_json_and_table(capsys, store):
    rep = report_json(capsys, store)
    ins = rep["insights"]
    assert ins["hangs"] == [] and ins["hosts"] is None  # one writer, no hang
    ck = ins["checkpoint"]
    # the synthetic job: one crash, saves of JOB.checkpoint_save s every JOB.checkpoint_every steps
    assert ck["available"] and ck["disruptions"] == 1 and "rough" in ck["reason"]
    assert ck["save_seconds"] == pytest.approx(JOB.checkpoint_save)
    assert ck["mtbf_seconds"] == pytest.approx(rep["total_seconds"])  # total / 1 failure
    assert ck["recommended_interval_seconds"] > 0
    assert main(["report", "syn", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "Hangs: none detected" in out and "recommended interval" in out
