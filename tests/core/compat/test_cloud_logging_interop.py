"""Interoperability with ml-goodput-measurement 0.2.3 through Cloud Logging, both ways.

Both libraries talk to the same :class:`FakeCloudLogging` (a real gRPC server
on loopback) through their real clients:

* (a) the REFERENCE's own ``GoodputRecorder`` (``logging_enabled=True``, its
  ``google.cloud.logging`` client pointed at the fake by
  :func:`reference_client`) records a job of each compatibility family; the
  reference's ``GoodputCalculator`` and our :class:`Calculator` over our
  :class:`CloudLoggingStore` read the same entries and must agree;
* (b) our :class:`Recorder` writes the same job into our store; the
  reference's calculator reads it through its real client and must agree
  with ours.

"Agree" is the compatibility contract of semantics.md: goodput, total,
productive and every bucket within 1e-6 relative; the family's built-in
ground truth is checked too, so that two equally wrong answers cannot pass.

Times: the reference's recorder stamps entries with the wall-clock time of
the write (the log record's creation), and its calculator reads only entries
stamped at or before its (frozen) "now". So each family is shifted by whole
seconds (its times stay exact on the 1/64 s grid) to end shortly after the
real time of the test, and both calculators query at the family's shifted
query time. No test sleeps: the recorders' background threads are flushed.
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from typing import Any, Dict, Iterable, Mapping

import pytest

from ml_goodput_measurement.src import goodput as ref  # noqa: E402
from ml_goodput_measurement.src import goodput_utils as ref_utils  # noqa: E402

from goodput_core.timeline.buckets import BASE_BADPUT, BadputType  # noqa: E402
from goodput_core.queries.calculator import Calculator  # noqa: E402
from goodput_core.record.recorder import Recorder  # noqa: E402
from tests.support.fake_cloud_logging import FakeCloudLogging, cloud_store_factory, reference_client  # noqa: E402
from tests.support.reference_families import FAMILIES  # noqa: E402
from tests.support.reference_harness import entry_timestamp, frozen_reference_clock  # noqa: E402

PROJECT, LOG = "interop-proj", "goodput-interop"
REL = 1e-6
UTC = _dt.timezone.utc
CASES = [(name, seed) for name in sorted(FAMILIES) for seed in range(2)]
ORBAX_TYPES = ("save", "restore", "emergency_restore")
# The reference's span methods, by payload key prefix.
SPANS = {"tpu_init": "tpu_init", "training_prep": "training_preparation",
         "data_loading": "data_loading"}


# ----------------------------------------------------------------- helpers
@pytest.fixture
def fake():
    with FakeCloudLogging() as server:
        yield server


@pytest.fixture
def our_store(fake, tmp_path):
    with cloud_store_factory(fake, tmp_path / "spill", PROJECT, LOG) as make:
        yield make


def shifted_family(name: str, seed: int = 0):
    """The family's payloads, query time and truth, moved to end ~10 min from now.

    Every ``*_time`` value moves by the same whole number of seconds, so
    durations, the 1/64 s grid and the ground truth are unchanged.
    """
    payloads, query_time, truth = FAMILIES[name](seed)
    shift = float(math.ceil(time.time() + 600.0 - query_time))
    moved = [{k: (v + shift if k.endswith("_time") and isinstance(v, float) else v)
              for k, v in p.items()} for p in payloads]
    return moved, query_time + shift, truth


def as_datetime(t: float) -> _dt.datetime:
    # Exact: family times are multiples of 1/64 s, i.e. of 15625 us.
    return _dt.datetime.fromtimestamp(t, UTC)


def play(rec: Any, payloads: Iterable[Dict[str, Any]], orbax) -> None:
    """Drives ``rec``'s reference-named ``record_*`` methods with each payload.

    Both recorders have these methods (ours under the reference's names and
    signatures); times are passed as aware UTC datetimes, as users of the
    reference do. Orbax statistics go to ``orbax(payload)``: the reference's
    recorder has no method for them (Orbax's own logger writes them).
    """
    for p in payloads:
        if p.get("event_type") in ORBAX_TYPES:
            orbax(p)
        elif "step_start_time" in p:
            rec.record_step_start_time(int(p["step_count"]), as_datetime(p["step_start_time"]))
        elif "job_start_time" in p:
            rec.record_job_start_time(as_datetime(p["job_start_time"]))
        elif "job_end_time" in p:
            rec.record_job_end_time(as_datetime(p["job_end_time"]))
        elif "custom_badput_event_start_time" in p:
            rec.record_custom_badput_event_start_time(
                as_datetime(p["custom_badput_event_start_time"]),
                custom_badput_event_type=p["custom_badput_event_type"])
        elif "custom_badput_event_end_time" in p:
            rec.record_custom_badput_event_end_time(
                as_datetime(p["custom_badput_event_end_time"]),
                custom_badput_event_type=p["custom_badput_event_type"])
        else:
            for key, method in SPANS.items():
                for edge in ("start", "end"):
                    if f"{key}_{edge}_time" in p:
                        getattr(rec, f"record_{method}_{edge}_time")(
                            as_datetime(p[f"{key}_{edge}_time"]))
                        break
                else:
                    continue
                break
            else:
                raise AssertionError(f"no recorder method for {p}")


def reference_numbers(job: str, query_time: float, cache_dir: str, fake) -> Dict[str, Any]:
    """The reference calculator (real client to the fake, frozen clock)."""
    with reference_client(fake, PROJECT):
        # The calculator's own logger, built as it builds it, except for a short
        # writer latency: closing its (idle) writer thread otherwise takes 2 s.
        cloud = ref._CloudLogger(job, LOG, background_max_latency_s=0.01)
        calc = ref.GoodputCalculator(job, LOG, cloud_logger=cloud, cache_dir=cache_dir)
    try:
        with frozen_reference_clock(query_time):
            goodput, _, max_step = calc.get_job_goodput(include_badput_breakdown=True)
            details = calc.get_job_goodput_details()
    finally:
        cloud._async_handler.close()
    seconds = details["badput_time"]
    buckets: Dict[str, Any] = {}
    for member in ref_utils.BadputType:
        value = seconds.get(member)
        if member is ref_utils.BadputType.CUSTOM_BADPUT_EVENTS:
            buckets[member.name] = {k: float(v) for k, v in (value or {}).items()}
        else:
            buckets[member.name] = float(value or 0.0)
    return {"goodput": float(goodput), "max_productive_step": int(max_step),
            "productive": float(details["goodput_time"][ref_utils.GoodputType.TOTAL]),
            "total": float(details["total_elapsed_time"]), "buckets": buckets,
            "disruptions": int(details["disruption_count"])}


def our_numbers(job: str, query_time: float, store) -> Dict[str, Any]:
    calc = Calculator(job, store, clock=lambda: query_time)
    assert calc.refresh() > 0
    r = calc.cumulative()
    buckets: Dict[str, Any] = {b.name: r.badput_seconds[b] for b in BASE_BADPUT}
    buckets[BadputType.CUSTOM_BADPUT_EVENTS.name] = dict(r.custom_badput_seconds)
    return {"goodput": r.goodput, "max_productive_step": r.max_productive_step,
            "productive": r.productive_seconds, "total": r.total_seconds,
            "buckets": buckets, "disruptions": r.disruptions, "skipped": calc.skipped}


def close(a: float, b: float, what: str) -> None:
    assert a == pytest.approx(b, rel=REL, abs=1e-9), what


def assert_agree(ours: Mapping[str, Any], theirs: Mapping[str, Any], truth: Mapping[str, Any],
                 what: str) -> None:
    for key in ("goodput", "productive", "total"):
        close(ours[key], theirs[key], f"{what} {key}")
    close(ours["total"], truth["total_seconds"], f"{what} total vs truth")
    close(ours["productive"], truth["productive_seconds"], f"{what} productive vs truth")
    for bucket in (b.name for b in BASE_BADPUT):
        mine, ref_value = ours["buckets"][bucket], theirs["buckets"][bucket]
        if isinstance(ref_value, dict):  # custom events: per upper-cased type, and their sum
            assert set(mine) == set(ref_value), f"{what} {bucket}"
            for k in ref_value:
                close(mine[k], ref_value[k], f"{what} {bucket}[{k}]")
        else:
            close(mine, ref_value, f"{what} {bucket}")
        true = truth["buckets"][bucket]
        true = sum(true.values()) if isinstance(true, dict) else true
        mine = sum(mine.values()) if isinstance(mine, dict) else mine
        close(mine, true, f"{what} {bucket} vs truth")
    assert ours["max_productive_step"] == theirs["max_productive_step"], what
    assert ours["disruptions"] == theirs["disruptions"] == truth["disruptions"], what


# ----------------------------------------------------------------- (a) reference -> ours
@pytest.mark.parametrize("family,seed", CASES)
def test_reference_recorder_entries_give_the_same_numbers_to_both_calculators(
        family, seed, fake, our_store, tmp_path):
    payloads, query_time, truth = shifted_family(family, seed)
    job = truth["job_name"]
    with reference_client(fake, PROJECT):
        rec = ref.GoodputRecorder(job, LOG, logging_enabled=True,
                                  background_max_latency_s=0.01)
    try:
        play(rec, payloads, orbax=rec._cloud_logger.write_cloud_logging_entry)
        rec.flush()
    finally:
        rec._cloud_logger._async_handler.close()
    # Every payload arrived, in order, stamped before the query time.
    assert len(fake.payloads(job)) == len(payloads)
    assert all(e.timestamp.seconds <= query_time for e in fake.entries())

    theirs = reference_numbers(job, query_time, str(tmp_path / "ref-cache"), fake)
    ours = our_numbers(job, query_time, our_store())
    assert not ours["skipped"], ours["skipped"]
    assert_agree(ours, theirs, truth, f"{family}: reference-written")


# ----------------------------------------------------------------- (b) ours -> reference
class SimClock:
    """The recorder's clock: the time at which the family's entry is written."""

    def __init__(self, start: float):
        self.now = start

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("family,seed", CASES)
def test_our_recorder_entries_give_the_same_numbers_to_both_calculators(
        family, seed, fake, our_store, tmp_path):
    payloads, query_time, truth = shifted_family(family, seed)
    job = truth["job_name"]
    clock = SimClock(entry_timestamp(payloads[0]))
    store = our_store(batch_size=64)
    rec = Recorder(job, store=store, clock=clock, flush_interval_s=0.01, strict=True)

    def advance(p):  # write times follow the job, never backwards (as live)
        clock.now = max(clock.now, entry_timestamp(p))

    def stepwise(p):
        advance(p)
        return p

    play(rec, (stepwise(p) for p in payloads), orbax=rec.record_checkpoint_stats)
    assert rec.close(10) and store.flush(10)
    assert rec.stats()["written"] == len(payloads) and store.stats()["rejected"] == 0
    stamps = [e.timestamp.seconds + e.timestamp.nanos / 1e9 for e in fake.entries()]
    assert stamps == sorted(stamps) and stamps[-1] <= query_time

    theirs = reference_numbers(job, query_time, str(tmp_path / "ref-cache"), fake)
    ours = our_numbers(job, query_time, our_store())  # a fresh reader: nothing cached
    assert_agree(ours, theirs, truth, f"{family}: ours-written")
