"""``goodput import RUN --from SRC [--to DST]``: copy a run, skipping what is already there.

``SRC`` and ``DST`` are store URLs or JSONL files (see
:mod:`goodput_core.cli.commands.transfer`); a JSONL destination is appended to.

Import is idempotent. Before copying, it reads which events of the run the
destination already holds, and skips those:

* an event with writer metadata (an attempt id and a sequence number) is
  present when the destination holds the same ``(attempt, seq)``, or an equal
  payload without metadata (a copy that lost it, e.g. an export without
  ``--meta``);
* an event without metadata is present when the destination holds an equal
  payload, with or without metadata. Payloads compare as Python dicts do: key
  order and ``8`` vs ``8.0`` do not matter (Cloud Logging returns every
  number as a double).

Duplicates inside the source itself are copied as they are: a source is
taken to be a faithful record. Memory: one page of events, plus a 16-byte
digest and at most an ``(attempt, seq)`` pair per event the destination held
before the import (nothing for a fresh destination). Cloud Logging also drops
a re-sent entry by itself (deterministic insert ids), which covers entries
older than the store's read look-back.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from typing import Any, Iterator, List, Optional, Tuple

from goodput_core.cli import CliError, CliIOError
from goodput_core.cli.commands.transfer import (
    PAGE_SIZE, ProgressBar, Skips, add_common_arguments, dumps_line, has_writer, is_jsonl,
    metadata_present, page_size, progress_bar, read_jsonl, read_store)
from goodput_core.events import EventRecord, to_payload
from goodput_core.redact import redact
from goodput_core.stores import Store, StoreError, open_store

__all__ = ["Present", "StoreSink", "JsonlSink", "copy_run", "payload_digest",
           "add_arguments", "run"]


def _canonical(value: Any) -> Any:
    """Payload values compared as Python compares them (``8 == 8.0``)."""
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def payload_digest(e: EventRecord) -> bytes:
    """16 bytes identifying the event's payload (blind to key order and int/float)."""
    text = json.dumps(_canonical(to_payload(e)), sort_keys=True, separators=(",", ":"),
                      default=repr)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()  # ASCII: ensure_ascii


class Present:
    """The events a destination held before the import (rules: module docstring)."""

    def __init__(self):
        self._writers = set()       # (attempt, seq) of events with writer metadata
        self._bare = set()          # payload digests of events without it
        self._with_writer = set()   # payload digests of events with it

    def __len__(self) -> int:
        return len(self._bare) + len(self._writers)

    def add(self, e: EventRecord) -> None:
        if has_writer(e):
            self._writers.add((e.attempt, e.seq))
            self._with_writer.add(payload_digest(e))
        else:
            self._bare.add(payload_digest(e))

    def __contains__(self, e: EventRecord) -> bool:
        if has_writer(e):
            return (e.attempt, e.seq) in self._writers or (
                bool(self._bare) and payload_digest(e) in self._bare)
        digest = payload_digest(e)
        return digest in self._bare or digest in self._with_writer


class StoreSink:
    """Writes into a store; for Cloud Logging, waits for delivery at the end."""

    def __init__(self, store: Store, run: str, page_size: int = PAGE_SIZE):
        self.store, self.run, self.page_size = store, run, page_size
        self.name = store.url or type(store).__name__
        self.written = 0  # events committed so far (each page is one transaction)

    def existing(self) -> Iterator[List[EventRecord]]:
        return read_store(self.store, self.run, self.page_size)

    def write(self, batch: List[EventRecord]) -> None:
        self.store.append(batch)
        self.written += len(batch)

    def finish(self, timeout_s: float) -> None:
        """Raises CliError when queued events are not delivered in time."""
        flush = getattr(self.store, "flush", None)  # the Cloud Logging store queues
        if flush is not None and flush(timeout_s) is False:
            raise CliError(
                f"not every event reached {self.name} within {timeout_s:g} s: the rest waits "
                "in a local spill file and is delivered by the next goodput process that "
                "writes to this log; running the same import again is safe")

    def close(self) -> None:
        """The store is closed by whoever opened it."""


class JsonlSink:
    """Appends lines to a JSONL file (``-``: stdout), with ``_writer`` when known."""

    def __init__(self, spec: str, run: str, page_size: int = PAGE_SIZE):
        self.spec, self.run, self.page_size = spec, run, page_size
        self.name = "stdout" if spec == "-" else spec
        self._f = None

    def existing(self) -> Iterator[List[EventRecord]]:
        if self.spec == "-" or not os.path.exists(self.spec):
            return iter(())
        # Unusable lines already in the file are not this import's to report.
        return read_jsonl(self.spec, self.run, Skips(), self.page_size)

    def _open(self):
        if self.spec == "-":
            return sys.stdout
        try:
            needs_newline = False
            if os.path.exists(self.spec) and os.path.getsize(self.spec) > 0:
                with open(self.spec, "rb") as f:
                    f.seek(-1, os.SEEK_END)
                    needs_newline = f.read(1) != b"\n"
            # appended to (imports are idempotent); created 0600, never through a symlink
            fd = os.open(self.spec, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW,
                         0o600)
            f = open(fd, "a", encoding="utf-8", newline="\n")
            if needs_newline:  # a truncated last line must not swallow our first one
                f.write("\n")
            return f
        except OSError as exc:
            raise CliIOError(f"cannot write {self.spec}: {exc.strerror or exc}") from exc

    def write(self, batch: List[EventRecord]) -> None:
        if self._f is None:
            self._f = self._open()
        try:
            self._f.write("".join(dumps_line(e, metadata_present(e)) for e in batch))
        except BrokenPipeError:
            if self.spec == "-":
                raise  # the reader of stdout stopped early: run() ends quietly
            raise CliIOError(f"cannot write {self.name}: broken pipe") from None
        except OSError as exc:
            raise CliIOError(f"cannot write {self.name}: {exc.strerror or exc}") from exc

    def finish(self, timeout_s: float) -> None:
        if self._f is not None:
            self._f.flush()

    def close(self) -> None:
        if self._f is not None and self._f is not sys.stdout:
            self._f.close()
        self._f = None


def copy_run(source, sink, *, progress: Optional[ProgressBar] = None,
             position: Optional[List[float]] = None) -> Tuple[int, int]:
    """Copies the source's batches into ``sink``, skipping what it already holds.

    Args:
      source: an iterable of event batches (``read_store``, ``read_jsonl``).
      sink: a :class:`StoreSink` or :class:`JsonlSink`.
      progress: redrawn after each batch; ``position[0]`` is the fraction
        of the source read (NaN: unknown).

    Returns:
      ``(copied, already_present)`` event counts.
    """
    present = Present()
    for batch in sink.existing():
        for e in batch:
            present.add(e)
    copied = skipped = 0
    for batch in source:
        fresh = [e for e in batch if e not in present] if len(present) else batch
        skipped += len(batch) - len(fresh)
        if fresh:
            sink.write(fresh)
            copied += len(fresh)
        if progress is not None:
            progress.update(copied + skipped, _fraction(position))
    if progress is not None:
        progress.finish(copied + skipped, _fraction(position))
    return copied, skipped


def _fraction(position: Optional[List[float]]) -> Optional[float]:
    if position is None or math.isnan(position[0]):
        return None
    return position[0]


def add_arguments(parser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--from", dest="source", required=True, metavar="SRC",
                        help="store URL, or a .jsonl file ('-': stdin)")
    parser.add_argument("--to", dest="dest", default=None, metavar="DST",
                        help="store URL, or a .jsonl file to append to "
                             "(default: $GOODPUT_STORE or the user data dir)")
    parser.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                        help="how long to wait for delivery to Cloud Logging (default 300)")


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def run(args) -> int:
    page, name = page_size(args), args.run
    src, dst = args.source, args.dest
    # Stdin to stdout is a fine filter; one file both read and appended to is not.
    if dst is not None and "-" not in (src, dst) and is_jsonl(src) and is_jsonl(dst) \
            and _same_file(src, dst):
        raise CliError(f"--from and --to name the same file {redact(src)}")
    skips, position = Skips(), [math.nan]
    source_store = sink_store = sink = None
    try:
        if is_jsonl(src):
            source = read_jsonl(src, name, skips, page, position)
        else:
            source_store = open_store(src, create=False)
            source = read_store(source_store, name, page)
        if dst is not None and is_jsonl(dst):
            sink = JsonlSink(dst, name, page)
        else:
            sink_store = open_store(dst)
            sink = StoreSink(sink_store, name, page)
        # A closed pipe (`--to - | head`) is reported by goodput_core.cli.
        try:
            copied, already = copy_run(source, sink, position=position,
                                       progress=progress_bar(args, f"import {name}"))
        except StoreError as exc:  # the destination failed halfway (disk full...)
            done = getattr(sink, "written", 0)
            raise CliError(f"{exc}; {done} events were imported before the failure: running "
                           "the same import again is safe (it skips them)") from None
        if copied + already == 0:
            detail = (f" ({sum(skips.values())} lines skipped: {skips.describe()})" if skips
                      else " (see: goodput runs)" if source_store is not None else "")
            raise CliError(f"no events of run {name!r} in {redact(src)}{detail}")
        sink.finish(args.timeout)
    finally:
        # The sink's file first; a store's close delivers what it still queues.
        for obj in (sink, sink_store, source_store):
            if obj is not None:
                obj.close()
    # With --to - the events are on stdout: the summary must not join them.
    print(f"imported {copied} events of {name!r} into {sink.name} ({already} already there)",
          file=sys.stderr if dst == "-" else sys.stdout)
    if skips:
        print(f"goodput import: skipped {sum(skips.values())} unusable input lines: "
              f"{skips.describe()}", file=sys.stderr)
    return 0
