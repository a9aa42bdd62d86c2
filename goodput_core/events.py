"""The event model: kinds, payload keys, validation and (de)serialisation.

One event is one flat JSON object ("payload") in the format that
``ml-goodput-measurement`` writes to Google Cloud Logging, so logs written by
either library can be read by the other. Every kind is defined once, in
:data:`KINDS`; everything else (the recorder, the stores, the calculator, the
compatibility layer) looks kinds up here.

In memory and in the stores an event is an :class:`EventRecord`: the run name,
an integer kind code, the primary timestamp (POSIX seconds, float, UTC), the
step number when the kind has one, a dict of extra payload keys (or ``None``),
and the writer metadata that is not part of the payload (process index, host,
pid, attempt id, sequence number, write time).

Timestamps given as :class:`datetime.datetime` are converted with
``.timestamp()``: a *naive* datetime is local time, Python's own convention
and the reference's, so ``datetime.now()`` gives the same numbers on every
machine whatever its time zone (:func:`to_timestamp`).
"""

from __future__ import annotations

import datetime as _dt
import enum
import math
import numbers
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

__all__ = [
    "Kind",
    "KindSpec",
    "KINDS",
    "KIND_BY_TIME_KEY",
    "EventRecord",
    "SkipReason",
    "JOB_NAME",
    "STEP_COUNT",
    "ORBAX_STEP",
    "to_timestamp",
    "to_payload",
    "from_payload",
]

# Payload keys shared by several kinds (names as in the reference).
JOB_NAME = "job_name"
STEP_COUNT = "step_count"
ORBAX_STEP = "step"
CUSTOM_BADPUT_EVENT_TYPE = "custom_badput_event_type"
ELASTIC_WAIT_EVENT_TYPE = "elastic_wait_event_type"
ORBAX_EVENT_TYPE = "event_type"
HANG_LAST_PROGRESS = "last_progress_time"
HANG_EXPECTED_STEP = "expected_step_seconds"
HANG_STACK = "hang_stack"
HEARTBEAT_SECONDS = "heartbeat_seconds"


class Kind(enum.IntEnum):
    """Stable integer codes of event kinds (stored on disk: never renumber)."""

    JOB_START = 1
    JOB_END = 2
    STEP_START = 3
    STEP_END = 4
    TPU_INIT_START = 5
    TPU_INIT_END = 6
    TRAINING_PREP_START = 7
    TRAINING_PREP_END = 8
    DATA_LOADING_START = 9
    DATA_LOADING_END = 10
    CUSTOM_BADPUT_START = 11
    CUSTOM_BADPUT_END = 12
    ELASTIC_SLICE_COUNTS = 13
    ELASTIC_WAIT_START = 14
    ELASTIC_WAIT_END = 15
    ELASTIC_REINIT_START = 16
    ELASTIC_REINIT_END = 17
    CHECKPOINT_STATS = 18  # an Orbax save/restore statistics entry
    PROGRAM_STARTUP_START = 19
    PROGRAM_STARTUP_END = 20
    CHECKPOINT_SAVE_START = 21
    CHECKPOINT_SAVE_END = 22
    CHECKPOINT_RESTORE_START = 23
    CHECKPOINT_RESTORE_END = 24
    DISRUPTION = 25
    METADATA = 26
    METRIC = 27
    INPUT_STALL_START = 28  # the accelerator waited for input (semantics rule 7)
    INPUT_STALL_END = 29
    HANG = 30  # a hang detected by the watchdog (insights)
    HANG_END = 31  # progress resumed after a hang
    HEARTBEAT = 32  # the lead writer is alive (semantics rule 15)
    # A load recorded by the native ``with rec.data_loading():`` (semantics
    # rule 16): the accelerator waited for it, wherever it lies. Recorded
    # inside the load's own DATA_LOADING_START/END, which the reference reads.
    BLOCKING_LOAD_START = 40
    BLOCKING_LOAD_END = 41
    # Scheduling (lifecycle): the scheduler accepted the job (or requeued it),
    # and every host of an attempt was placed.
    JOB_SUBMITTED = 50
    RESOURCES_GRANTED = 51


class KindSpec(NamedTuple):
    """How one kind looks on the wire.

    Attributes:
      kind: the kind code.
      time_key: the payload key of the primary timestamp.
      step_key: the payload key of the step number, or ``None``.
      required: extra payload keys that must be present (besides job/time/step).
      reference: True for kinds the reference library defines.
    """

    kind: Kind
    time_key: str
    step_key: Optional[str]
    required: Tuple[str, ...]
    reference: bool


def _spec(kind, time_key, step_key=None, required=(), reference=True):
    return KindSpec(kind, time_key, step_key, tuple(required), reference)


KINDS: Dict[Kind, KindSpec] = {
    s.kind: s
    for s in (
        _spec(Kind.JOB_START, "job_start_time"),
        _spec(Kind.JOB_END, "job_end_time"),
        _spec(Kind.STEP_START, "step_start_time", STEP_COUNT),
        _spec(Kind.STEP_END, "step_end_time", STEP_COUNT, reference=False),
        _spec(Kind.TPU_INIT_START, "tpu_init_start_time"),
        _spec(Kind.TPU_INIT_END, "tpu_init_end_time"),
        _spec(Kind.TRAINING_PREP_START, "training_prep_start_time"),
        _spec(Kind.TRAINING_PREP_END, "training_prep_end_time"),
        _spec(Kind.DATA_LOADING_START, "data_loading_start_time"),
        _spec(Kind.DATA_LOADING_END, "data_loading_end_time"),
        _spec(Kind.CUSTOM_BADPUT_START, "custom_badput_event_start_time",
              required=(CUSTOM_BADPUT_EVENT_TYPE,)),
        _spec(Kind.CUSTOM_BADPUT_END, "custom_badput_event_end_time",
              required=(CUSTOM_BADPUT_EVENT_TYPE,)),
        _spec(Kind.ELASTIC_SLICE_COUNTS, "elastic_slice_counts_timestamp",
              required=("active_slices", "total_slices", "available_slices")),
        _spec(Kind.ELASTIC_WAIT_START, "elastic_wait_start_time",
              required=(ELASTIC_WAIT_EVENT_TYPE,)),
        _spec(Kind.ELASTIC_WAIT_END, "elastic_wait_end_time",
              required=(ELASTIC_WAIT_EVENT_TYPE,)),
        _spec(Kind.ELASTIC_REINIT_START, "elastic_reinit_start_time"),
        _spec(Kind.ELASTIC_REINIT_END, "elastic_reinit_end_time"),
        # Orbax entries have no single timestamp key; the primary time is the
        # start of the span that blocked the training loop (see below).
        _spec(Kind.CHECKPOINT_STATS, "checkpoint_manager_blocking_start_time",
              ORBAX_STEP, required=(ORBAX_EVENT_TYPE,)),
        _spec(Kind.PROGRAM_STARTUP_START, "program_startup_start_time", reference=False),
        _spec(Kind.PROGRAM_STARTUP_END, "program_startup_end_time", reference=False),
        _spec(Kind.CHECKPOINT_SAVE_START, "checkpoint_save_start_time", ORBAX_STEP,
              reference=False),
        _spec(Kind.CHECKPOINT_SAVE_END, "checkpoint_save_end_time", ORBAX_STEP,
              reference=False),
        _spec(Kind.CHECKPOINT_RESTORE_START, "checkpoint_restore_start_time", ORBAX_STEP,
              reference=False),
        _spec(Kind.CHECKPOINT_RESTORE_END, "checkpoint_restore_end_time", ORBAX_STEP,
              reference=False),
        _spec(Kind.DISRUPTION, "disruption_time", required=("disruption_cause",),
              reference=False),
        _spec(Kind.METADATA, "metadata_time", reference=False),
        _spec(Kind.METRIC, "metric_time", STEP_COUNT,
              required=("metric_name", "metric_value"), reference=False),
        _spec(Kind.INPUT_STALL_START, "input_stall_start_time", reference=False),
        _spec(Kind.INPUT_STALL_END, "input_stall_end_time", reference=False),
        # hang_time is the detection; the span starts when the hung step should
        # have ended: last_progress_time + expected_step_seconds.
        _spec(Kind.HANG, "hang_time", STEP_COUNT,
              required=(HANG_LAST_PROGRESS, HANG_EXPECTED_STEP), reference=False),
        _spec(Kind.HANG_END, "hang_end_time", reference=False),
        # written by the lead writer's thread every heartbeat_seconds
        _spec(Kind.HEARTBEAT, "heartbeat_time", reference=False),
        _spec(Kind.BLOCKING_LOAD_START, "blocking_load_start_time", reference=False),
        _spec(Kind.BLOCKING_LOAD_END, "blocking_load_end_time", reference=False),
        _spec(Kind.JOB_SUBMITTED, "job_submitted_time", reference=False),
        _spec(Kind.RESOURCES_GRANTED, "resources_granted_time", reference=False),
    )
}

KIND_BY_TIME_KEY: Dict[str, Kind] = {s.time_key: k for k, s in KINDS.items()}

# Orbax statistics: the span that blocked the loop, per event type.
ORBAX_SAVE_START = "checkpoint_manager_blocking_start_time"
ORBAX_SAVE_DURATION = "checkpoint_manager_blocking_duration_secs"
ORBAX_RESTORE_START = "checkpoint_manager_start_time"
ORBAX_RESTORE_DURATION = "checkpoint_manager_duration_secs"
ORBAX_EVENT_TYPES = ("save", "restore", "emergency_restore")


ORBAX_DIRECTORY = "directory"


def persistent_directory(directory: Any) -> bool:
    """An Orbax save to persistent storage: its directory is a URL (``gs://``,
    ``s3://``, ...), as ml-goodput-measurement 0.2.4 tells ``gs://`` saves
    from local ones; a local path (a ramdisk, a local SSD) is a local save."""
    if not isinstance(directory, str):
        return False
    scheme, sep, _ = directory.partition("://")
    return bool(sep) and scheme.isidentifier()


def orbax_span_keys(event_type: str) -> Tuple[str, str]:
    """Returns (start key, duration key) of the blocking span of an Orbax entry."""
    if event_type == "save":
        return ORBAX_SAVE_START, ORBAX_SAVE_DURATION
    return ORBAX_RESTORE_START, ORBAX_RESTORE_DURATION


class EventRecord(NamedTuple):
    """One stored event: payload fields plus writer metadata.

    ``extra`` holds the payload keys other than ``job_name``, the primary time
    key and the step key (``None`` when there are none). Writer metadata is
    not part of the payload; it defaults to unknown values for events read
    from foreign logs.
    """

    run: str
    kind: int
    time: float
    step: Optional[int] = None
    extra: Optional[Dict[str, Any]] = None
    process_index: int = 0
    host: str = ""
    pid: int = 0
    attempt: str = ""
    seq: int = 0
    write_time: float = math.nan


class SkipReason(str, enum.Enum):
    """Why the reader skipped a payload (counted per reason in query results)."""

    NOT_A_DICT = "not_a_dict"
    NO_JOB_NAME = "no_job_name"
    NO_TIMESTAMP = "no_timestamp"
    NON_FINITE = "non_finite"
    BAD_STEP = "bad_step"
    MISSING_FIELD = "missing_field"
    MISSING_ORBAX_DURATION = "missing_orbax_duration"


def to_timestamp(value: Any) -> float:
    """Converts a user-given time to POSIX seconds.

    Args:
      value: a number of POSIX seconds, or a datetime. A naive datetime is
        local time (``datetime.now()``, as in Python and the reference); an
        aware one is exact in any time zone.

    Returns:
      A finite float.

    Raises:
      ValueError: for anything else, or a non-finite number.
    """
    t = type(value)
    if t is float or t is int:
        f = _real_to_float(value)
    elif isinstance(value, _dt.datetime):
        return value.timestamp()  # naive = local time, as Python and the reference
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        f = _real_to_float(value)  # numpy scalars (np.int64, np.float32...), Fractions
    else:
        raise ValueError(f"time must be POSIX seconds or a datetime, got {value!r}")
    if not math.isfinite(f):
        raise ValueError(f"time must be finite, got {value!r}")
    return f


def _real_to_float(value: Any) -> float:
    """``float(value)``; a number too large for a float is a ValueError, not OverflowError."""
    try:
        return float(value)
    except (OverflowError, TypeError) as exc:
        raise ValueError(f"time must be POSIX seconds, got {value!r} ({exc})") from None


def to_payload(event: EventRecord) -> Dict[str, Any]:
    """Builds the reference-format payload of an event (key order as the reference)."""
    spec = KINDS.get(event.kind)  # Kind is an IntEnum: plain int codes find it too
    if spec is None:
        spec = KINDS[Kind(event.kind)]  # ValueError for an unknown code
    payload: Dict[str, Any] = {JOB_NAME: event.run}
    if event.kind == Kind.CHECKPOINT_STATS:
        # Orbax entries: the extra dict is the entry as Orbax logged it.
        payload.update(event.extra or {})
        return payload
    if spec.step_key is not None and event.step is not None:
        payload[spec.step_key] = int(event.step)
    if event.extra:
        payload.update(event.extra)
    payload[spec.time_key] = event.time
    return payload


def _as_step(value: Any) -> Optional[int]:
    """Steps read back from Cloud Logging are doubles: cast integral ones to int."""
    if type(value) is int:
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _finite(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        f = float(value)
    except OverflowError:  # an int beyond a double: no finite time
        return None
    return f if math.isfinite(f) else None


def _orbax_from_payload(run: str, payload: Mapping[str, Any]):
    event_type = payload.get(ORBAX_EVENT_TYPE)
    start_key, dur_key = orbax_span_keys(event_type)
    duration = payload.get(dur_key)
    if duration is None:
        return SkipReason.MISSING_ORBAX_DURATION
    if _finite(duration) is None:
        return SkipReason.NON_FINITE
    start = payload.get(start_key)
    if start is None:
        t = math.nan  # no start time: the span ends at the entry's write time
    else:
        t = _finite(start)
        if t is None:
            return SkipReason.NON_FINITE
    step = _as_step(payload.get(ORBAX_STEP)) if ORBAX_STEP in payload else None
    extra = {k: v for k, v in payload.items() if k != JOB_NAME}
    return EventRecord(run, int(Kind.CHECKPOINT_STATS), t, step, extra)


def from_payload(payload: Any, run: Optional[str] = None):
    """Parses one reference-format payload.

    Args:
      payload: a dict as written to Cloud Logging (or our JSONL export).
      run: when given, the run name to use if the payload lacks ``job_name``
        (Orbax's own logger does not write one).

    Returns:
      An :class:`EventRecord` (writer metadata left at defaults), or a
      :class:`SkipReason` saying why the payload cannot be used. Never raises.
    """
    if not isinstance(payload, Mapping):
        return SkipReason.NOT_A_DICT
    name = payload.get(JOB_NAME, run)
    if not isinstance(name, str):
        return SkipReason.NO_JOB_NAME
    if payload.get(ORBAX_EVENT_TYPE) in ORBAX_EVENT_TYPES:
        return _orbax_from_payload(name, payload)
    kind = None
    for key in payload:
        kind = KIND_BY_TIME_KEY.get(key)
        if kind is not None:
            break
    if kind is None:
        return SkipReason.NO_TIMESTAMP
    spec = KINDS[kind]
    t = _finite(payload[spec.time_key])
    if t is None:
        return SkipReason.NON_FINITE
    step = None
    if spec.step_key is not None:
        raw = payload.get(spec.step_key)
        if raw is None and kind in (Kind.STEP_START, Kind.STEP_END):
            return SkipReason.BAD_STEP
        if raw is not None:
            step = _as_step(raw)
            if step is None:
                return SkipReason.BAD_STEP
    for key in spec.required:
        if key not in payload:
            return SkipReason.MISSING_FIELD
    skip = {JOB_NAME, spec.time_key, spec.step_key}
    extra = {k: v for k, v in payload.items() if k not in skip} or None
    if extra and kind == Kind.ELASTIC_SLICE_COUNTS:
        for key in spec.required:
            if _finite(extra[key]) is None:
                return SkipReason.NON_FINITE
    return EventRecord(name, int(kind), t, step, extra)
