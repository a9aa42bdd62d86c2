"""How goodput events look in Google Cloud Logging, and the queries that find them.

Pure Python (no Google client import), so it is cheap to test on its own.

An event is one log entry: severity ``INFO``, ``jsonPayload`` = the
reference-format payload (:func:`goodput_core.events.to_payload`), and our
writer metadata as string labels (``goodput_process_index``, ``goodput_host``,
``goodput_pid``, ``goodput_attempt``, ``goodput_seq``, ``goodput_write_time``,
plus ``goodput_payload``, the payload's exact JSON: a ``jsonPayload`` is a
protobuf ``Struct``, which keeps every number as a double and no key order, so
the label is what makes our payloads read back byte-identical). The label is
used only when it agrees with the ``jsonPayload`` (which stays the truth).
Entries written by the reference carry none of these labels: their writer
metadata stays at the defaults, their write time is the entry's timestamp,
their keys are sorted and integral doubles of the keys in
:data:`KNOWN_INT_KEYS` are turned back into ints.

Filters are built with :func:`quote`: a run or log name containing quotes,
backslashes or filter syntax stays one string literal and cannot change the
meaning of the query (security S1 of docs/quality.md).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import re
from typing import Any, Callable, Dict, MutableMapping, Mapping, Optional, Tuple

from goodput_core.events import EventRecord, SkipReason, from_payload, to_payload

__all__ = [
    "DIAGNOSTIC_KEY",
    "KNOWN_INT_KEYS",
    "quote",
    "format_timestamp",
    "split_timestamp",
    "insert_id",
    "encode_labels",
    "apply_labels",
    "restore_payload",
    "run_filter",
    "log_filter",
    "validate_names",
    "make_entry",
    "decode_entry",
]

#: The payload key of the diagnostic entry google-cloud-logging writes on a
#: process's first ``Logger.log_*`` call (``{"logging.googleapis.com/diagnostic":
#: {"instrumentation_source": [{"name": "python", "version": ...}]}}``, no
#: severity, no job name). Readers skip it.
DIAGNOSTIC_KEY = "logging.googleapis.com/diagnostic"

#: Integer-valued payload keys of the reference's and Orbax's entries.
KNOWN_INT_KEYS = frozenset((
    "step_count", "step", "active_slices", "total_slices", "available_slices",
    "num_devices", "num_processes",
))

_LABEL = "goodput_"
_MAX_PAYLOAD_LABEL = 32_000  # label values are limited to 64 KiB
_LOG_ID = re.compile(r"[A-Za-z0-9_.\-/]{1,511}")
# Project ids, including legacy domain-scoped ones ("example.com:my-project").
_PROJECT = re.compile(r"[A-Za-z0-9][A-Za-z0-9\-.:_]{0,127}")


def validate_names(project: str, log_name: str) -> None:
    """Rejects project ids and log names Cloud Logging would not accept.

    Raises:
      ValueError: with what is allowed.
    """
    if not isinstance(project, str) or not _PROJECT.fullmatch(project):
        raise ValueError(f"invalid Google Cloud project id {project!r}")
    if not isinstance(log_name, str) or not _LOG_ID.fullmatch(log_name):
        raise ValueError(
            f"invalid log name {log_name!r}: use up to 511 letters, digits, '_', '-', '.', '/'")


def quote(value: str) -> str:
    """Returns ``value`` as one double-quoted filter string literal.

    Backslashes are escaped first, then double quotes: whatever the value
    contains, the literal ends exactly at the closing quote added here.
    """
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def split_timestamp(t: float) -> Tuple[int, int]:
    """POSIX seconds -> (seconds, nanos) as in a protobuf Timestamp."""
    seconds = math.floor(t)
    nanos = int(round((t - seconds) * 1e9))
    if nanos >= 1_000_000_000:
        seconds, nanos = seconds + 1, nanos - 1_000_000_000
    return int(seconds), nanos


def format_timestamp(seconds: int, nanos: int = 0) -> str:
    """RFC 3339 UTC with nanoseconds, as filters compare timestamps exactly."""
    day = _dt.datetime(1970, 1, 1) + _dt.timedelta(seconds=seconds)
    return day.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"


def insert_id(event: EventRecord, payload: Mapping[str, Any]) -> str:
    """A deterministic insert id: a resent entry is the same entry.

    Cloud Logging treats entries with the same ``insertId`` and timestamp as
    one, so a batch re-sent after a lost response is not duplicated. Our own
    events are named by writer attempt and sequence number (zero-padded, so
    ids of one writer sort in write order); others by a hash of content.
    """
    if event.attempt and event.seq > 0:
        return f"gp-{event.attempt}-{event.seq:012d}"
    blob = json.dumps([payload, event.process_index, event.host, event.pid,
                       repr(event.write_time)], sort_keys=True, default=repr)
    return "gp-h-" + hashlib.sha1(blob.encode()).hexdigest()[:24]


def encode_labels(event: EventRecord, payload: Mapping[str, Any]) -> Dict[str, str]:
    """Writer metadata (and the payload's exact JSON) as string labels."""
    labels = {
        _LABEL + "process_index": str(event.process_index),
        _LABEL + "host": event.host,
        _LABEL + "pid": str(event.pid),
        _LABEL + "attempt": event.attempt,
        _LABEL + "seq": str(event.seq),
        _LABEL + "write_time": repr(float(event.write_time)),
    }
    exact = json.dumps(payload, separators=(",", ":"))
    if len(exact) <= _MAX_PAYLOAD_LABEL:
        labels[_LABEL + "payload"] = exact
    return labels


def _int_label(labels: Mapping[str, str], key: str) -> int:
    try:
        return int(labels.get(_LABEL + key, "0"))
    except ValueError:
        return 0


def apply_labels(event: EventRecord, labels: Mapping[str, str], entry_time: float) -> EventRecord:
    """Returns ``event`` with writer metadata read back from entry labels.

    Args:
      event: as parsed from the payload (metadata at defaults).
      labels: the entry's labels (any others are ignored).
      entry_time: the entry's timestamp, the write time of foreign entries.
    """
    if _LABEL + "attempt" not in labels:
        return event._replace(write_time=entry_time)
    try:
        write_time = float(labels.get(_LABEL + "write_time", "nan"))
    except ValueError:
        write_time = math.nan
    if math.isnan(write_time):
        write_time = entry_time
    return event._replace(
        process_index=_int_label(labels, "process_index"),
        host=labels.get(_LABEL + "host", ""),
        pid=_int_label(labels, "pid"),
        attempt=labels.get(_LABEL + "attempt", ""),
        seq=_int_label(labels, "seq"),
        write_time=write_time,
    )


def restore_payload(payload: Dict[str, Any], labels: Mapping[str, str]) -> Dict[str, Any]:
    """Undoes what Cloud Logging does to a payload: key order and int types.

    Args:
      payload: the ``jsonPayload`` as read (numbers are floats, keys in map order).
      labels: the entry's labels; ``goodput_payload`` (when we wrote the entry
        and it equals ``payload`` up to number types) is returned as is.

    Returns:
      The payload as written; for entries of other writers, keys sorted and
      :data:`KNOWN_INT_KEYS` holding integral numbers as ints.
    """
    exact = labels.get(_LABEL + "payload")
    if exact is not None:
        try:
            written = json.loads(exact)
        except ValueError:
            written = None
        if isinstance(written, dict) and written == payload:  # 8 == 8.0: types differ only
            return written
    out = {k: payload[k] for k in sorted(payload)}
    for key in KNOWN_INT_KEYS:
        value = out.get(key)
        if type(value) is float and math.isfinite(value) and value == int(value):
            out[key] = int(value)
    return out


def log_filter(project: str, log_name: str) -> str:
    """``logName="projects/P/logs/L" AND severity=INFO`` (quoted)."""
    return f"logName={quote(f'projects/{project}/logs/{log_name}')} AND severity=INFO"


def run_filter(project: str, log_name: str, run: str,
               since: Optional[Tuple[int, int, str]], floor: Tuple[int, int]) -> str:
    """The query for the entries of ``run`` after a cursor.

    Args:
      project, log_name: where the entries are.
      run: the run (``jsonPayload.job_name``), any string.
      since: ``(seconds, nanos, insert_id)`` of the last entry already read,
        or None for a first read.
      floor: ``(seconds, nanos)``: the look-back bound of a first read.

    Returns:
      ``logName=... AND severity=INFO AND jsonPayload.job_name="..." AND`` a
      time clause: ``timestamp>=FLOOR``, or strictly after the cursor entry,
      ``(timestamp>T OR (timestamp=T AND insertId>ID))``. Every clause is
      parenthesised or atomic, so the query means the same under Cloud
      Logging's precedence (where OR binds tighter than AND).
    """
    return " AND ".join([log_filter(project, log_name), f"jsonPayload.job_name={quote(run)}",
                         after_clause(since, floor)])


def after_clause(since: Optional[Tuple[int, int, str]], floor: Tuple[int, int]) -> str:
    """The time clause of a query resuming after a cursor (see :func:`run_filter`):
    ``timestamp>=FLOOR`` without one, else strictly after the cursor entry."""
    if since is None:
        return f"timestamp>={quote(format_timestamp(*floor))}"
    seconds, nanos, last_id = since
    t = quote(format_timestamp(seconds, nanos))
    return f"(timestamp>{t} OR (timestamp={t} AND insertId>{quote(last_id)}))"


def _jsonable(value: Any) -> Any:
    """JSON fallback for numpy scalars and the like (a Struct takes JSON types)."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


def make_entry(event: EventRecord, clock: Callable[[], float]) -> Dict[str, Any]:
    """An event as a queued entry: ``{"p": payload, "l": labels, "i": insert id,
    "t": [seconds, nanos]}`` (plain JSON: the spill file stores it as is).

    The entry's timestamp is the event's write time (else its time, else now).
    """
    # A JSON round trip: the entry is exactly what the spill file gives back.
    payload = json.loads(json.dumps(to_payload(event), default=_jsonable))
    wt = event.write_time
    when = wt if wt == wt else (event.time if event.time == event.time else clock())
    return {"p": payload, "l": encode_labels(event, payload),
            "i": insert_id(event, payload), "t": list(split_timestamp(when))}


def _value(v) -> Any:
    """A protobuf ``Value`` as plain Python (numbers stay floats, as on the wire)."""
    kind = v.WhichOneof("kind")
    if kind == "number_value":
        return v.number_value
    if kind == "string_value":
        return v.string_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "struct_value":
        return {k: _value(x) for k, x in v.struct_value.fields.items()}
    if kind == "list_value":
        return [_value(x) for x in v.list_value.values]
    return None


def decode_entry(raw: Any, run: str, skipped: MutableMapping[str, int]) -> Optional[EventRecord]:
    """A raw ``LogEntry`` protobuf -> an event of ``run``, or None.

    Args:
      raw: the entry (``google.logging.v2.LogEntry`` protobuf message).
      run: the run asked for; entries of another run are skipped (the
        service compares strings ignoring case).
      skipped: counts skipped entries per reason (``SkipReason`` values,
        ``"diagnostic"``, ``"other_run"``, ``"not_json"``).
    """
    if raw.WhichOneof("payload") != "json_payload":
        skipped["not_json"] += 1
        return None
    payload = {k: _value(v) for k, v in raw.json_payload.fields.items()}
    if DIAGNOSTIC_KEY in payload:
        skipped["diagnostic"] += 1
        return None
    labels = dict(raw.labels)
    event = from_payload(restore_payload(payload, labels))
    if isinstance(event, SkipReason):
        skipped[event.value] += 1
        return None
    if event.run != run:
        skipped["other_run"] += 1
        return None
    entry_time = raw.timestamp.seconds + raw.timestamp.nanos / 1e9
    return apply_labels(event, labels, entry_time)
