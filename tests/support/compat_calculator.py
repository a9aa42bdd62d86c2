"""Runs our compat ``GoodputCalculator`` and the reference's side by side.

* :func:`ours` feeds a payload list to our compat calculator through the
  harness's :class:`~tests.support.reference_harness.FakeCloudLogger` (the
  reference's ``read_cloud_logging_entries`` contract);
* :func:`ours_via_recorder` replays the same payloads through our compat
  ``GoodputRecorder`` (its reference-named methods, datetimes as a user of
  the reference passes them) into a fresh memory store and reads that;
* :func:`reference` is a fresh reference calculator over the same fake
  logger, with its own cache directory and a frozen clock;
* small builders for hand-made payload lists with known ground truth.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import tempfile
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

from goodput_core.compat import goodput as compat
from goodput_core.stores import open_store
from tests.support.reference_harness import FakeCloudLogger, frozen_reference_clock

T0 = 1_700_000_000.0
JOB = "compat-job"
UTC = dt.timezone.utc
_STORES = itertools.count()


def p(**fields: Any) -> Dict[str, Any]:
    """A payload of :data:`JOB`."""
    return {"job_name": JOB, **fields}


def steps(first: int, starts: Sequence[float]) -> List[Dict[str, Any]]:
    """Step-start payloads ``first, first+1, ...`` at the given times."""
    return [p(step_count=first + i, step_start_time=t) for i, t in enumerate(starts)]


def span(kind: str, a: float, b: float) -> List[Dict[str, Any]]:
    """A ``{kind}_start_time`` / ``{kind}_end_time`` pair."""
    return [p(**{f"{kind}_start_time": a}), p(**{f"{kind}_end_time": b})]


def custom(a: float, b: float, kind: str = "eval") -> List[Dict[str, Any]]:
    return [p(custom_badput_event_type=kind, custom_badput_event_start_time=a),
            p(custom_badput_event_type=kind, custom_badput_event_end_time=b)]


def orbax(event_type: str, step: int, start: float, duration: float) -> Dict[str, Any]:
    """An Orbax statistics entry whose blocking span is ``[start, start + duration]``
    (every field the reference's checkpoint calculator needs)."""
    if event_type == "save":
        return {"step": step, "event_type": "save", "directory": "gs://b/ckpt",
                "wait_for_prev_start_time": start, "wait_for_prev_duration_secs": 0.0,
                "checkpointer_blocking_start_time": start,
                "checkpointer_blocking_duration_secs": duration,
                "get_old_steps_start_time": start + duration, "get_old_steps_duration_secs": 0.0,
                "checkpoint_manager_blocking_start_time": start,
                "checkpoint_manager_blocking_duration_secs": duration, "job_name": JOB}
    return {"step": step, "event_type": event_type, "directory": "gs://b/ckpt",
            "checkpointer_start_time": start, "checkpointer_duration_secs": duration,
            "checkpoint_manager_start_time": start, "checkpoint_manager_duration_secs": duration,
            "job_name": JOB}


def job_of(payloads: Sequence[Mapping[str, Any]]) -> str:
    return next((x["job_name"] for x in payloads if "event_type" not in x), JOB)


def fake_logger(payloads: Sequence[Mapping[str, Any]], query_time: float,
                job: Optional[str] = None) -> FakeCloudLogger:
    """A fake Cloud Logging reader holding ``payloads`` (written in order)."""
    fake = FakeCloudLogger(job or job_of(payloads), clock=lambda: query_time)
    for x in payloads:
        fake.append(x)
    return fake


def ours(payloads: Sequence[Mapping[str, Any]], query_time: float, cls=None,
         job: Optional[str] = None, logger: Any = None):
    """Our compat calculator reading ``payloads`` through a fake cloud logger."""
    job = job or job_of(payloads)
    logger = logger if logger is not None else fake_logger(payloads, query_time, job)
    return (cls or compat.GoodputCalculator)(job, "log", cloud_logger=logger,
                                             clock=lambda: query_time)


def _when(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, UTC)


def replay(recorder, payload: Mapping[str, Any]) -> None:
    """Records one reference-format payload through the reference-named methods."""
    x = dict(payload)
    if "event_type" in x:
        recorder.record_checkpoint_stats(x)
        return
    one = {"job_start_time": recorder.record_job_start_time,
           "job_end_time": recorder.record_job_end_time,
           "tpu_init_start_time": recorder.record_tpu_init_start_time,
           "tpu_init_end_time": recorder.record_tpu_init_end_time,
           "training_prep_start_time": recorder.record_training_preparation_start_time,
           "training_prep_end_time": recorder.record_training_preparation_end_time,
           "data_loading_start_time": recorder.record_data_loading_start_time,
           "data_loading_end_time": recorder.record_data_loading_end_time,
           "elastic_reinit_start_time": recorder.record_elastic_reinit_start_time,
           "elastic_reinit_end_time": recorder.record_elastic_reinit_end_time}
    for key, method in one.items():
        if key in x:
            method(_when(x[key]))
            return
    if "step_start_time" in x:
        recorder.record_step_start_time(int(x["step_count"]), _when(x["step_start_time"]))
    elif "custom_badput_event_start_time" in x:
        recorder.record_custom_badput_event_start_time(
            _when(x["custom_badput_event_start_time"]), x["custom_badput_event_type"])
    elif "custom_badput_event_end_time" in x:
        recorder.record_custom_badput_event_end_time(
            _when(x["custom_badput_event_end_time"]), x["custom_badput_event_type"])
    elif "elastic_slice_counts_timestamp" in x:
        recorder.record_elastic_slice_counts(x["active_slices"], x["total_slices"],
                                             x["available_slices"],
                                             _when(x["elastic_slice_counts_timestamp"]))
    elif "elastic_wait_start_time" in x:
        recorder.record_elastic_wait_start_time(x["elastic_wait_event_type"],
                                                _when(x["elastic_wait_start_time"]))
    elif "elastic_wait_end_time" in x:
        recorder.record_elastic_wait_end_time(x["elastic_wait_event_type"],
                                              _when(x["elastic_wait_end_time"]))
    else:
        raise AssertionError(f"no replay for {x}")


def ours_via_recorder(payloads: Sequence[Mapping[str, Any]], query_time: float,
                      cls=None, job: Optional[str] = None):
    """Our compat calculator over a memory store written by our compat recorder."""
    job = job or job_of(payloads)
    url = f"memory://compat-calculator-{next(_STORES)}"
    rec = compat.GoodputRecorder(job, "log", True, store=url, clock=lambda: query_time,
                                 strict=True)
    try:
        for x in payloads:
            replay(rec, x)
        assert rec.flush(timeout=30)
    finally:
        rec.close(timeout=30)
    return (cls or compat.GoodputCalculator)(job, "log", store=open_store(url),
                                             clock=lambda: query_time)


@contextlib.contextmanager
def reference(payloads: Sequence[Mapping[str, Any]], query_time: float, cls=None,
              job: Optional[str] = None, logger: Any = None) -> Iterator[Any]:
    """A fresh reference calculator (``cls``: default ``GoodputCalculator``) over
    a fake logger holding ``payloads``; its clock is frozen at ``query_time``
    while the block runs."""
    from ml_goodput_measurement.src import goodput as ref_goodput

    job = job or job_of(payloads)
    logger = logger if logger is not None else fake_logger(payloads, query_time, job)
    with tempfile.TemporaryDirectory(prefix="goodput-ref-cache-") as cache_dir, \
            frozen_reference_clock(query_time):
        yield (cls or ref_goodput.GoodputCalculator)(job, "log", cloud_logger=logger,
                                                     cache_dir=cache_dir)


def by_name(breakdown: Mapping[Any, Any]) -> Dict[str, Any]:
    """``{BadputType: value}`` of either library -> ``{name: value}``."""
    return {k.name: (dict(v) if isinstance(v, dict) else float(v)) for k, v in breakdown.items()}


def flat(value: Any) -> float:
    """A bucket value as one number (custom events summed)."""
    return float(sum(value.values())) if isinstance(value, dict) else float(value)
