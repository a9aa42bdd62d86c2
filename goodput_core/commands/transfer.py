"""What ``goodput export`` and ``goodput import`` share: the JSONL format, paged
reading of stores and files, and the progress bar.

::

    goodput export RUN [--store URL] [-o FILE.jsonl|-] [--meta]      (commands/export.py)
    goodput import RUN --from SRC [--to DST]                         (commands/import_.py)

A JSONL file holds one reference-format payload per line (the
``jsonPayload`` that ml-goodput-measurement writes to Cloud Logging, so the
reference can read the lines as they are). Writer metadata (process index,
host, pid, attempt, sequence number, write time) is not part of a payload: it
travels under a ``_writer`` key, written by ``export --meta`` and by imports
into a JSONL file whenever an event has any.

``SRC`` and ``DST`` are store URLs (``sqlite:///...``, ``memory://...``,
``cloud-logging://PROJECT/LOG``, a bare ``*.sqlite`` path) or JSONL files: a
spec ending in ``.jsonl`` (or ``-``, stdin/stdout) is a JSONL file, anything
else a store URL.

Everything is read and written ``--page-size`` events at a time, so memory
does not grow with the run. Unusable JSONL lines (not JSON or nested too
deep, not a payload, another run, a malformed ``_writer``, or an event no
store can hold: a step or sequence number beyond 64 bits, e.g. a
``"step_count": 1e19`` from Cloud Logging's doubles) are skipped and counted,
with the first line number of each reason, never fatal: they are found
before anything is written, so one bad line never stops an import halfway. The progress bar is drawn on stderr
when it is a terminal or with ``--progress``; its total is known for JSONL
files (bytes read), a store source shows a running count.
"""

from __future__ import annotations

import collections
import json
import math
import os
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

from goodput_core.cli import CliError, CliIOError
from goodput_core.events import EventRecord, SkipReason, from_payload, to_payload
from goodput_core.storable import check_event
from goodput_core.stores import Store

__all__ = [
    "PAGE_SIZE", "WRITER_KEY", "ProgressBar", "Skips", "is_jsonl", "has_writer",
    "metadata_present", "writer_metadata", "dumps_line", "parse_line", "read_store",
    "read_jsonl", "export_run", "write_batches", "add_common_arguments", "progress_bar",
    "page_size",
]

PAGE_SIZE = 1000
WRITER_KEY = "_writer"
_INT_FIELDS = ("process_index", "pid", "seq")
_STR_FIELDS = ("host", "attempt")


# ------------------------------------------------------------------ progress
class ProgressBar:
    """A one-line progress bar redrawn in place with carriage returns.

    Args:
      label: what is being done (``import run-1``).
      enabled: False makes every call a no-op.
      stream: where to draw (default stderr).
      clock: monotonic seconds; redraws are at most every ``min_interval_s``
        (the final one always), so a fast copy does not spend its time drawing.
    """

    def __init__(self, label: str, *, enabled: bool = True, stream=None,
                 clock: Callable[[], float] = time.monotonic, min_interval_s: float = 0.1,
                 width: int = 24):
        self.label, self.enabled = label, enabled
        self._stream, self._clock = stream, clock
        self._interval, self._width = min_interval_s, width
        self._start = self._last = None
        self._shown = 0

    def update(self, count: int, fraction: Optional[float] = None, *, final: bool = False) -> None:
        """Shows ``count`` events done; ``fraction`` (0-1) when the total is known."""
        if not self.enabled:
            return
        now = self._clock()
        if self._start is None:
            self._start = now
        elif not final and now - self._last < self._interval:
            return
        self._last = now
        text = f"{self.label}"
        if fraction is not None:
            fraction = min(max(fraction, 0.0), 1.0)
            done = int(round(fraction * self._width))
            text += f" [{'#' * done}{'.' * (self._width - done)}] {fraction * 100:3.0f}%"
        text += f" {count:,} events"
        elapsed = now - self._start
        if elapsed > 0:
            text += f" ({count / elapsed:,.0f}/s)"
        stream = self._stream or sys.stderr
        # Pad over the previous text: a shorter line must not leave its tail behind.
        stream.write("\r" + text.ljust(self._shown))
        self._shown = len(text)
        if final:
            stream.write("\n")
        stream.flush()

    def finish(self, count: int, fraction: Optional[float] = None) -> None:
        """Draws the last state and ends the line."""
        self.update(count, fraction, final=True)


# ------------------------------------------------------------------ JSONL lines
class Skips(collections.Counter):
    """Unusable input lines per reason, with the first line number of each."""

    def __init__(self):
        super().__init__()
        self.first: Dict[str, int] = {}

    def add(self, reason: str, line: int) -> None:
        self[reason] += 1
        self.first.setdefault(reason, line)

    def describe(self) -> str:
        parts = [f"{n} {reason} (first at line {self.first[reason]})"
                 for reason, n in sorted(self.items())]
        return ", ".join(parts)


def is_jsonl(spec: str) -> bool:
    """True when ``spec`` names a JSONL file rather than a store URL."""
    return spec == "-" or spec.lower().endswith(".jsonl")


def _jsonable(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy scalars
    return item() if callable(item) else str(value)


# One encoder for every line (json.dumps with ``default=`` builds one per call).
_encode = json.JSONEncoder(default=_jsonable).encode


def has_writer(e: EventRecord) -> bool:
    """An event names its writer when it has an attempt id and a sequence number."""
    return bool(e.attempt) and e.seq > 0


def metadata_present(e: EventRecord) -> bool:
    """True when any writer field is known (such events keep a ``_writer`` in files)."""
    return (has_writer(e) or bool(e.host) or e.pid != 0 or e.process_index != 0
            or not math.isnan(e.write_time))


def writer_metadata(e: EventRecord) -> Dict[str, Any]:
    """The ``_writer`` object of a line (a NaN write time is ``null``)."""
    return {"process_index": e.process_index, "host": e.host, "pid": e.pid,
            "attempt": e.attempt, "seq": e.seq,
            "write_time": None if math.isnan(e.write_time) else e.write_time}


def _parse_writer(meta: Any) -> Dict[str, Any]:
    """A ``_writer`` object -> EventRecord fields; ValueError when malformed."""
    if not isinstance(meta, dict):
        raise ValueError("not an object")
    out: Dict[str, Any] = {}
    for key in _INT_FIELDS:
        v = meta.get(key, 0)
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if type(v) is not int:
            raise ValueError(key)
        out[key] = v
    for key in _STR_FIELDS:
        v = meta.get(key, "")
        if type(v) is not str:
            raise ValueError(key)
        out[key] = v
    wt = meta.get("write_time")
    if wt is None:
        out["write_time"] = math.nan
    elif isinstance(wt, (int, float)) and not isinstance(wt, bool) and math.isfinite(wt):
        out["write_time"] = float(wt)
    else:
        raise ValueError("write_time")
    return out


def dumps_line(e: EventRecord, meta: bool) -> str:
    """One JSONL line: the payload, plus ``_writer`` when ``meta``."""
    payload = to_payload(e)
    if meta:
        payload[WRITER_KEY] = writer_metadata(e)
    return _encode(payload) + "\n"


def parse_line(raw: Any, run: str):
    """One JSONL line -> an EventRecord of ``run``, or the reason it is unusable.

    Returns:
      An :class:`EventRecord`, ``None`` for a blank line, or a reason string
      (``not_json``, a :class:`SkipReason` value, ``other_run``, ``bad_writer``,
      ``unstorable``).
    """
    if not raw.strip():
        return None
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):  # also invalid UTF-8; nesting too deep
        return "not_json"
    if not isinstance(obj, dict):
        return SkipReason.NOT_A_DICT.value
    meta = obj.pop(WRITER_KEY, None)
    event = from_payload(obj, run=run)
    if isinstance(event, SkipReason):
        return event.value
    if event.run != run:
        return "other_run"
    if meta is not None:
        try:
            event = event._replace(**_parse_writer(meta))
        except ValueError:
            return "bad_writer"
    try:
        check_event(event)
    except ValueError:
        return "unstorable"
    return event


# ------------------------------------------------------------------ sources
def read_store(store: Store, run: str, page_size: int = PAGE_SIZE) -> Iterator[List[EventRecord]]:
    """The events of ``run`` in append order, ``page_size`` at a time."""
    cursor = None
    while True:
        events, cursor = store.read(run, since=cursor, limit=page_size)
        if not events:
            return
        yield events


def read_jsonl(spec: str, run: str, skips: Skips, page_size: int = PAGE_SIZE,
               position: Optional[List[float]] = None) -> Iterator[List[EventRecord]]:
    """The events of ``run`` in a JSONL file (``-``: stdin), ``page_size`` at a time.

    Args:
      skips: counts unusable lines.
      position: when given, ``position[0]`` is kept at the fraction of the
        file read so far (for the progress bar; stays NaN for stdin).

    Raises:
      CliError: the file cannot be opened or read.
    """
    try:
        f = sys.stdin.buffer if spec == "-" else open(spec, "rb")
    except OSError as exc:
        raise CliIOError(f"cannot read {spec}: {exc.strerror or exc}") from exc
    try:
        size = os.fstat(f.fileno()).st_size if spec != "-" else 0
        done, batch = 0, []
        for lineno, raw in enumerate(f, 1):
            done += len(raw)
            event = parse_line(raw, run)
            if isinstance(event, EventRecord):
                batch.append(event)
            elif event is not None:
                skips.add(event, lineno)
            if len(batch) >= page_size:
                if position is not None and size:
                    position[0] = done / size
                yield batch
                batch = []
        if position is not None and size:
            position[0] = 1.0
        if batch:
            yield batch
    except OSError as exc:
        raise CliIOError(f"cannot read {spec}: {exc.strerror or exc}") from exc
    finally:
        if f is not sys.stdin.buffer:
            f.close()


# ------------------------------------------------------------------ output
def export_run(store: Store, run: str, out, *, meta: bool = False, page_size: int = PAGE_SIZE,
               progress: Optional[ProgressBar] = None) -> int:
    """Writes the events of ``run`` to the text stream ``out``; returns the count."""
    return write_batches(read_store(store, run, page_size), out, meta, progress)


def write_batches(batches, out, meta: bool, progress: Optional[ProgressBar]) -> int:
    """Writes batches of events as JSONL lines to ``out``; returns the count."""
    n = 0
    for batch in batches:
        out.write("".join(dumps_line(e, meta) for e in batch))
        n += len(batch)
        if progress is not None:
            progress.update(n)
    if progress is not None:
        progress.finish(n)
    out.flush()
    return n


# ------------------------------------------------------------------ shared by both commands
def add_common_arguments(parser) -> None:
    """RUN, --progress and --page-size."""
    parser.add_argument("run", help="run (job) name")
    parser.add_argument("--progress", action="store_true",
                        help="draw a progress bar on stderr (default: when it is a terminal)")
    parser.add_argument("--page-size", type=int, default=PAGE_SIZE, metavar="N",
                        help=f"events read and written at a time (default {PAGE_SIZE})")


def progress_bar(args, label: str) -> ProgressBar:
    """The bar of a command: drawn with --progress or when stderr is a terminal."""
    return ProgressBar(label, enabled=bool(args.progress) or sys.stderr.isatty())


def page_size(args) -> int:
    if args.page_size < 1:
        raise CliError(f"--page-size must be at least 1, got {args.page_size}")
    return args.page_size
