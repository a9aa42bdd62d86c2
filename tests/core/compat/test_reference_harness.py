"""Sanity checks of the reference harness and the family generators.

The harness runs ml-goodput-measurement 0.2.3 offline; before any
differential test trusts it, these tests pin it to numbers computed by hand
(semantics.md rules and the reference's documented behaviour) and to the
ground truth the family generators build in.
"""

import datetime
import math

import pytest


from goodput_core.events import SkipReason, from_payload  # noqa: E402
from ml_goodput_measurement.src import goodput as ref_goodput  # noqa: E402
from tests.support import reference_families as fam  # noqa: E402
from tests.support.reference_harness import (  # noqa: E402
    REFERENCE_BUCKETS,
    FakeCloudLogger,
    entry_timestamp,
    frozen_reference_clock,
    reference_interval_goodput,
    reference_job_goodput,
    reference_step_deviation,
)

T0 = 1_700_000_000.0
JOB = "tiny"
BASE_BUCKETS = REFERENCE_BUCKETS[:11]  # the elastic ones come after OTHER


def _p(**fields):
    return {"job_name": JOB, **fields}


def tiny_clean_run():
    """1 s init, 2 s prep, 0.5 s blocking load, 10 steps of 1 s (+0.5 s on step 0).

    Every step also holds a 0.125 s overlapped load. Job end closes step 9
    at T0 + 14.
    """
    p = [_p(job_start_time=T0),
         _p(tpu_init_start_time=T0), _p(tpu_init_end_time=T0 + 1),
         _p(training_prep_start_time=T0 + 1), _p(training_prep_end_time=T0 + 3),
         _p(data_loading_start_time=T0 + 3), _p(data_loading_end_time=T0 + 3.5)]
    t = T0 + 3.5
    for k in range(10):
        p += [_p(step_count=k, step_start_time=t),
              _p(data_loading_start_time=t), _p(data_loading_end_time=t + 0.125)]
        t += 1.5 if k == 0 else 1.0
    p.append(_p(job_end_time=t))
    assert t == T0 + 14
    return p


def test_tiny_clean_run_matches_hand_computation():
    r = reference_job_goodput(tiny_clean_run(), T0 + 20)
    # Total: first job start to job end = 14 s. Step spans: step 0 = 1.5 s,
    # steps 1..8 = 1 s each, step 9 = 1 s closed by the job end. Program
    # startup = first span - mean of the spans between two step starts other
    # than the first (steps 1..8, mean 1 s) = 0.5 s. Productive = 14 - 1 - 2
    # - 0.5 (sync load) - 0.5 (startup) = 10 s. Nothing is left for OTHER.
    assert r["total_seconds"] == 14.0
    assert r["productive_seconds"] == 10.0
    assert r["goodput_percent"] == pytest.approx(100 * 10 / 14, rel=1e-12)
    expected = dict.fromkeys(REFERENCE_BUCKETS, 0.0)
    expected.update(TPU_INITIALIZATION=1.0, TRAINING_PREP=2.0, DATA_LOADING_SYNC=0.5,
                    PROGRAM_STARTUP=0.5, DATA_LOADING_ASYNC=10 * 0.125, CUSTOM_BADPUT_EVENTS={})
    assert r["badput_seconds"] == expected
    # Percent = 100 * seconds / total for 0 < seconds < total, else 0.
    for name in BASE_BUCKETS:
        if name != "CUSTOM_BADPUT_EVENTS":
            assert r["badput_percent"][name] == pytest.approx(100 * expected[name] / 14, abs=1e-12)
    assert r["max_productive_step"] == 9 and r["last_recorded_step"] == 9
    assert r["disruptions"] == 0
    # Step times 1.5, 1, ..., 1 (step 9 has no next start): median 1, MAD 0.
    assert r["ideal_step_time"] == 1.0
    assert r["step_deviations"] == {0: 0.5, **{k: 0.0 for k in range(1, 9)}}
    assert "OTHER" in r["reported_buckets"] and "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION" not in r["reported_buckets"]


def test_tiny_run_open_job_runs_to_the_query_time():
    payloads = [p for p in tiny_clean_run() if "job_end_time" not in p]
    r = reference_job_goodput(payloads, T0 + 16)
    # Total up to the query (16 s); step 9's open span (3 s) is OTHER.
    assert r["total_seconds"] == 16.0
    assert r["productive_seconds"] == 9.0
    assert r["badput_seconds"]["OTHER"] == 16 - 9 - 1 - 2 - 0.5 - 0.5
    assert r["max_productive_step"] == 8


def test_query_time_hides_later_entries():
    # At T0 + 6.5 steps 0..2 have started (T0+3.5, 5, 6): spans 0 (1.5 s)
    # and 1 (1 s) lie between two step starts, so startup = 1.5 - 1 = 0.5 s;
    # step 2's open half second is OTHER.
    r = reference_job_goodput(tiny_clean_run(), T0 + 6.5)
    assert r["total_seconds"] == 6.5
    assert r["productive_seconds"] == 2.0
    assert r["badput_seconds"]["PROGRAM_STARTUP"] == 0.5
    assert r["badput_seconds"]["OTHER"] == 0.5
    assert r["max_productive_step"] == 1


def test_tiny_interval_follows_reference_window_rules():
    r = reference_interval_goodput(tiny_clean_run(), T0 + 4, T0 + 20)
    # Entries written after T0+4 start with step 1 (T0+5); the last is the
    # job end (T0+14): the window is clipped to [T0+5, T0+14].
    assert (r["window_start"], r["window_end"]) == (T0 + 5, T0 + 14)
    assert r["total_seconds"] == 9.0
    assert r["goodput_percent"] == 100.0
    # The first load seen in the window counts as sync although it overlaps
    # step 1 (the reference's "first load is sync" rule applied per window).
    assert r["badput_seconds"]["DATA_LOADING_SYNC"] == pytest.approx(0.125)
    assert r["badput_seconds"]["DATA_LOADING_ASYNC"] == pytest.approx(1.0)
    assert r["max_productive_step"] == 9


def test_step_deviation_and_sub_second_steps():
    dev = reference_step_deviation(tiny_clean_run())
    assert dev["ideal_step_time"] == 1.0 and dev["step_deviations"][0] == 0.5
    fast = [_p(job_start_time=T0)] + [_p(step_count=k, step_start_time=T0 + 0.25 * k)
                                      for k in range(20)]
    # The reference ignores steps under one second: no ideal step time at all.
    with pytest.raises(ValueError):
        reference_step_deviation(fast)


@pytest.mark.parametrize("name", sorted(fam.FAMILIES))
@pytest.mark.parametrize("seed", range(6))
def test_families_reproduce_their_ground_truth_in_the_reference(name, seed):
    payloads, query_time, expected = fam.FAMILIES[name](seed)
    r = reference_job_goodput(payloads, query_time)
    assert r["total_seconds"] == pytest.approx(expected["total_seconds"], rel=1e-12)
    assert r["productive_seconds"] == pytest.approx(expected["productive_seconds"], rel=1e-12)
    for bucket, value in expected["buckets"].items():
        if isinstance(value, dict):
            assert r["badput_seconds"][bucket] == pytest.approx(value, rel=1e-12)
        else:
            assert r["badput_seconds"][bucket] == pytest.approx(value, rel=1e-12, abs=1e-9)
    assert r["max_productive_step"] == expected["max_productive_step"]
    assert r["disruptions"] == expected["disruptions"]


@pytest.mark.parametrize("name", sorted(fam.FAMILIES))
def test_family_payloads_parse_with_our_event_model(name):
    payloads, query_time, expected = fam.FAMILIES[name](1)
    for payload in payloads:
        event = from_payload(payload)
        assert not isinstance(event, SkipReason), (payload, event)
        assert event.run == expected["job_name"]
        assert event.time <= query_time
    assert all(isinstance(n, str) for n in expected["notes"])


def test_families_have_the_advertised_shape():
    _, _, restart = fam.restart_run(3, restarts=3, steps=60)
    assert restart["disruptions"] == 3
    assert restart["buckets"]["WASTED_PROGRESS_FROM_DISRUPTION"] > 0
    assert restart["buckets"]["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] > 0
    _, _, heavy = fam.compile_heavy_run(3)
    assert heavy["buckets"]["PROGRAM_STARTUP"] > 4.0
    _, _, custom = fam.custom_event_run(3)
    assert set(custom["buckets"]["CUSTOM_BADPUT_EVENTS"]) == {"EVAL", "SDC_CHECK"}
    payloads, _, saves = fam.orbax_save_run(3)
    steps = [p["step"] for p in payloads if p.get("event_type") == "save"]
    assert steps and len(steps) == len(set(steps))
    assert saves["buckets"]["UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"] > 0


def test_restart_with_loads_after_restart_shows_reference_double_count():
    # Documents the reference quirk the restart family avoids (rule 7).
    payloads, query_time, expected = fam.restart_run(0, loads_after_restart=True)
    r = reference_job_goodput(payloads, query_time)
    assert r["badput_seconds"]["DATA_LOADING_SYNC"] > expected["buckets"]["DATA_LOADING_SYNC"] + 0.01


def test_checkpoint_entries_may_come_separately():
    payloads, query_time, _ = fam.orbax_save_run(2)
    inline = reference_job_goodput(payloads, query_time)
    saves = [p for p in payloads if p.get("event_type")]
    for s in saves:
        del s["job_name"]  # as Orbax's own logger hands them over before tagging
    others = [p for p in payloads if not p.get("event_type")]
    separate = reference_job_goodput(others, query_time, checkpoint_entries=saves)
    assert separate["badput_seconds"] == inline["badput_seconds"]
    assert separate["productive_seconds"] == inline["productive_seconds"]


def test_fake_logger_emulates_the_cloud_logging_query():
    fake = FakeCloudLogger(JOB, clock=lambda: T0 + 10)
    for p in tiny_clean_run():
        fake.append(p)
    fake.append({"job_name": "other-job", "job_start_time": T0 + 1})
    entries, last = fake.read_cloud_logging_entries()
    assert all(e["job_name"] == JOB for e in entries)
    assert max(entry_timestamp(e) for e in entries) <= T0 + 10  # end defaults to now
    assert fake.job_start_time == datetime.datetime.fromtimestamp(T0, datetime.timezone.utc)
    assert all(isinstance(e["step_count"], float) for e in entries if "step_count" in e)
    more, last2 = fake.read_cloud_logging_entries(end_time=datetime.datetime.fromtimestamp(
        T0 + 100, datetime.timezone.utc), last_entry_info=last)
    assert more and all(entry_timestamp(e) > T0 + 10 for e in more)
    assert last2[0] > last[0]
    none, empty_last = fake.read_cloud_logging_entries(last_entry_info=last2, end_time=T0 + 100)
    assert none == [] and empty_last == (None, None)


def test_fake_logger_timestamps_never_go_backwards():
    fake = FakeCloudLogger(JOB)
    fake.append(_p(job_start_time=T0 + 5))
    fake.append(_p(step_count=0, step_start_time=T0 + 1))  # backfilled
    entries, last = fake.read_cloud_logging_entries(start_time=T0, end_time=T0 + 6)
    assert len(entries) == 2 and last[0].timestamp() == T0 + 5


def test_orbax_write_time_is_end_of_blocking_span():
    entry = {"event_type": "save", "checkpoint_manager_blocking_start_time": T0,
             "checkpoint_manager_blocking_duration_secs": 2.5, "wait_for_prev_start_time": T0}
    assert entry_timestamp(entry) == T0 + 2.5
    assert entry_timestamp({"event_type": "restore", "checkpoint_manager_start_time": T0}) is None


def test_clock_is_frozen_only_inside_and_restored():
    real = ref_goodput.datetime
    with frozen_reference_clock(T0 + 1.5):
        now = ref_goodput.datetime.datetime.now(datetime.timezone.utc)
        assert now.timestamp() == T0 + 1.5
        assert datetime.datetime.now().year >= 2024  # the real module is untouched
    assert ref_goodput.datetime is real


def test_harness_is_deterministic_and_isolated():
    payloads, query_time, _ = fam.restart_run(5)
    a = reference_job_goodput(payloads, query_time)
    b = reference_job_goodput(payloads, query_time)
    a.pop("raw"), b.pop("raw")
    assert a == b
    assert not math.isnan(a["goodput_percent"])
