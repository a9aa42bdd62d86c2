"""The recorder: an O(1), durable write on the caller's thread, a background writer.

Every ``record_*`` call validates its arguments and writes the event into this
process's journal, a memory-mapped ring that survives a SIGKILL of the process
(:mod:`goodput_core.record.ring`, :mod:`goodput_core.record.journal`; in
memory for an in-process store); nothing else happens on the caller's thread
(no system call, no lock, no exception: bad input is counted, warned about
once per kind and dropped, unless ``strict=True``). A daemon writer thread
drains the ring in batches into the store; the next writer, or any reader,
delivers what a killed one left. :meth:`Recorder.flush` is a fence: it returns
once everything recorded before it is stored. An ``atexit`` hook flushes every
live recorder, so a ``record_job_end_time()`` just before the interpreter
exits is not lost. ``multiprocessing`` ends its children with ``os._exit``
(no atexit), so the recorder also flushes from multiprocessing's own exit
finalizers: workers (``Process``, ``Pool`` after ``close()``/``join()``;
fork and spawn) that end normally keep their events. After ``os.fork()`` the
child gets a fresh journal, writer and attempt id; the parent's pending events
stay the parent's.

Example::

    from goodput_core import Recorder
    rec = Recorder("my-run")                 # default embedded sqlite store, opened by the writer
    rec.record_job_start_time()
    with rec.step(0):
        train_step()
    rec.record_job_end_time()
"""

from __future__ import annotations

import collections
import logging
import math
import os
import socket
import time
import uuid
from typing import Any, Callable, Dict, Optional

from goodput_core.events import EventRecord, Kind, to_timestamp
from goodput_core.record import hooks
# re-exported: callers and tests written before the hooks moved read them here
from goodput_core.record.hooks import _LIVE, flush_all, flush_before_read  # noqa: F401
from goodput_core.record.heartbeat import heartbeat_seconds as heartbeat_seconds_of
from goodput_core.record.hot_calls import bind_hot_calls
from goodput_core.record.phases import PhaseMixin
from goodput_core.record.stats import empty_stats, recorder_stats
from goodput_core.record.storable import (
    INT64_MAX, INT64_MIN, check_extra, check_int, check_text, describe_error)
from goodput_core.stores import Store, check_store_url
from goodput_core.stores.deferred import DeferredStore
from goodput_core.record.watchdog import watchdog_for
from goodput_core.record.writer import Writer
from goodput_core.record.zone_offset import MIN_OFFSET_S, zone_offset_hours
from goodput_core.events import to_payload

__all__ = ["Recorder", "NullRecorder", "NULL_RECORDER", "flush_all", "flush_before_read"]

logger = logging.getLogger("goodput")

_DEFAULT_QUEUE_SIZE = 200_000


_STEP_REQUIRED = frozenset((Kind.STEP_START, Kind.STEP_END))


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _bad_step(step: Any) -> int:
    """Returns ``step`` as an int, or raises ValueError (bools are not steps)."""
    if isinstance(step, bool) or step is None:
        raise ValueError(f"step must be an int, got {step!r}")
    try:
        as_int = int(step)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"step must be an int, got {step!r}") from None
    if as_int != step:
        raise ValueError(f"step must be an int, got {step!r}")
    check_int(as_int, "step")
    return as_int


class Recorder(PhaseMixin):
    """Records the events of one run into a store, off the caller's thread.

    The typed ``record_*`` methods (:class:`PhaseMixin`) call :meth:`_record`,
    which validates and calls ``_emit``: the producer of the writer's ring,
    bound once per process. The recorder *has* a :class:`Writer`
    (``_writer``): its thread takes the events from the ring to the store.

    Args:
      run: the run (job) name; events of every attempt of a job share it.
      store: a store URL, a path (sqlite), an open :class:`Store`, or None for
        the default embedded store (see :func:`goodput_core.stores.open_store`).
      clock: returns the current POSIX time in seconds (inject a fake in tests).
      strict: raise ``ValueError`` on misuse instead of counting and dropping.
      queue_size: events waiting for the writer at most before new ones are
        dropped (counted, and said on stderr); the first 16,384 wait in the
        journal, the rest in memory.
      flush_interval_s: how often the writer drains the queue when idle.
      process_index: written as writer metadata (multi-host jobs).
      cloud_logger: a duck-typed object with ``write_cloud_logging_entry``
        (the reference's contract): each payload is handed to it synchronously
        instead of being queued for the store.
      enabled: False makes every call a no-op (no store is opened, no thread
        started): e.g. on processes other than the one that should write.
      hang_detection: the hang watchdog (:mod:`goodput_core.record.watchdog`): True
        (default settings, ``GOODPUT_HANG_*`` variables applied), False, or a
        :class:`~goodput_core.record.watchdog.HangSettings`. Its thread starts at the
        first job start; nothing of it runs on the caller's thread.
      heartbeat_seconds: the lead writer's heartbeat interval (process index
        0, while a job runs; :mod:`goodput_core.record.heartbeat`): None reads
        ``GOODPUT_HEARTBEAT_SECONDS`` (default 10), 0 turns it off.
      durable: keep each event in this process's journal the moment its
        ``record_*`` call returns, so that it survives a SIGKILL
        (:mod:`goodput_core.record.journal`; for stores a later process can
        read, not ``memory://``). False: events wait in memory until stored.

    Raises:
      StoreError: the store URL is malformed (the store itself is opened by
        the writer thread: an error there is logged, counted in
        :meth:`stats` and makes :meth:`flush` return False).
      ValueError: a bad argument.
    """

    def __init__(
        self,
        run: str,
        store: Any = None,
        *,
        clock: Callable[[], float] = time.time,
        strict: bool = False,
        queue_size: int = _DEFAULT_QUEUE_SIZE,
        flush_interval_s: float = 0.5,
        process_index: int = 0,
        cloud_logger: Any = None,
        enabled: bool = True,
        hang_detection: Any = True,
        heartbeat_seconds: Any = None,
        durable: bool = True,
    ):
        if not isinstance(run, str) or not run:
            raise ValueError(f"run name must be a non-empty string, got {run!r}")
        check_text(run, "run name")
        if "\x00" in run:  # no store can hold it (PostgreSQL text refuses NUL)
            raise ValueError(f"run name {run!r} contains a NUL character")
        if queue_size < 1:
            raise ValueError("queue_size must be >= 1")
        if isinstance(process_index, bool) or not (
                isinstance(process_index, int) or hasattr(process_index, "__index__")) \
                or not INT64_MIN <= int(process_index) <= INT64_MAX:
            raise ValueError(f"process_index must be a 64-bit integer, got {process_index!r}")
        heartbeat_s = heartbeat_seconds_of(heartbeat_seconds)
        self.run = run
        self.job_name = run  # the reference's attribute name
        self._clock = clock
        self._strict = strict
        capacity, interval = int(queue_size), float(flush_interval_s)
        self.process_index = int(process_index)
        self._cloud_logger = cloud_logger
        self.enabled = bool(enabled)
        if not enabled:
            cloud_logger = None
            self._record = self._emit = _noop  # type: ignore[method-assign]
        self._store: Optional[Store] = (
            _store_for_writer(store) if enabled and cloud_logger is None else None)
        watchdog = (watchdog_for(self, hang_detection)
                    if enabled and cloud_logger is None else None)
        self._rejected: Dict[str, int] = collections.Counter()
        self._dropped_closed = 0  # record_* calls after close()
        self._closed = False
        self._writer = Writer(run, self._store, capacity=capacity,
                              interval=interval, durable=bool(durable), clock=clock,
                              process_index=self._process_index_now,
                              watchdog=watchdog, heartbeat_s=heartbeat_s)
        self._zone_warned = False
        self._init_process_state()
        if cloud_logger is not None:
            self._emit = self._emit_to_cloud_logger  # type: ignore[method-assign]
        hooks.register(self)

    # ----------------------------------------------------------------- state
    def _init_process_state(self) -> None:
        """Per-process state: rebuilt in a forked child (a new attempt id; the
        writer's ring, journal and thread are new too)."""
        self._pid = os.getpid()
        self._host = socket.gethostname()
        self._attempt = uuid.uuid4().hex[:16]
        writer = self._writer
        writer.new_process(self._host, self._pid, self._attempt)
        self._ring = writer.ring  # this side produces into it, the writer drains it
        if self._store is not None:
            self._emit = self._ring.emitter(self)  # type: ignore[method-assign]
            bind_hot_calls(self, self._emit, Recorder)
            writer.start()

    def _process_index_now(self) -> int:
        """The process index in force now (adapters set it once they know it)."""
        return self.process_index

    def _after_fork_in_child(self) -> None:
        watchdog = self._writer.watchdog
        if watchdog is not None:
            watchdog.after_fork_in_child()
        if isinstance(self._store, DeferredStore):  # before the child's writer starts
            self._store.after_fork_in_child()
        journal = self._ring.journal
        if journal is not None:
            journal.drop_in_forked_child()  # the parent's file, lock and pending events
        self._init_process_state()

    # ------------------------------------------------- the store, off-thread
    def flush(self, timeout: Optional[float] = 10.0, wait_for_delivery: bool = True) -> bool:
        """Blocks until every event recorded before this call is stored.

        Never longer than ``timeout``: the store is opened (and written) by
        the writer thread only. While the store cannot be opened or refuses
        writes, the events go to the spill file and this returns False as
        soon as the writer tried (see :meth:`stats`). Otherwise as
        :meth:`Writer.flush`. With a ``cloud_logger``: its ``flush()``, if any.
        """
        if self._store is None:
            flush = getattr(self._cloud_logger, "flush", None)
            if callable(flush):
                try:
                    flush()
                except Exception:
                    logger.exception("goodput: cloud_logger.flush failed")
                    return False
            return True
        return self._writer.flush(timeout, wait_for_delivery)

    def has_unstored(self) -> bool:
        """True while events recorded so far may not all be in the store yet."""
        return self._writer.has_unstored()

    def _leave_spilled(self, say: Optional[Callable[[str], Any]] = None) -> int:
        """The exit hook's part (:meth:`Writer.leave_spilled`)."""
        return self._writer.leave_spilled(say)

    @property
    def clock(self) -> Callable[[], float]:
        """The time source of this recorder (POSIX seconds); adapters share it."""
        return self._clock

    @property
    def attempt(self) -> str:
        """This process's attempt id (writer metadata; new after a fork)."""
        return self._attempt

    def stats(self) -> Dict[str, Any]:
        """What happened to the events recorded so far: stored, waiting, spilled,
        dropped and why (the keys: :func:`goodput_core.record.stats.recorder_stats`)."""
        return recorder_stats(self)

    @property
    def dropped(self) -> int:
        """Events dropped because the queue was full (or recorded after close())."""
        return self._ring.dropped + self._dropped_closed

    # ------------------------------------------------------------- hot path
    # ``_emit(kind, t, step, extra, write_time)`` is the ring's producer
    # (record/ring.py), bound per process in _init_process_state: the process
    # index in force now travels with the event (semantics rule 13).
    def _emit(self, kind: int, t: float, step: Optional[int], extra: Optional[dict],
              write_time: float) -> None:  # replaced per instance; a recorder
        self._dropped_closed += 1          # without a store never gets here

    def _emit_after_close(self, kind, t, step, extra, write_time) -> None:
        self._dropped_closed += 1

    def _emit_to_cloud_logger(self, kind, t, step, extra, write_time) -> None:
        try:
            self._cloud_logger.write_cloud_logging_entry(
                to_payload(EventRecord(self.run, kind, t, step, extra)))
            self._writer.appender.written += 1
        except Exception:  # the logger owns its I/O; never raise into the loop
            counts = self._writer.appender
            counts.write_errors += 1
            if counts.write_errors == 1:
                logger.exception("goodput: cloud_logger.write_cloud_logging_entry failed")

    def _reject(self, kind: Kind, error: Exception) -> None:
        if self._strict:
            raise ValueError(f"record {kind.name.lower()}: {describe_error(error)}") from error
        name = kind.name.lower()
        self._rejected[name] += 1
        if self._rejected[name] == 1:
            logger.warning("goodput: dropped a %s event with bad arguments: %s "
                           "(further ones are counted silently)", name, describe_error(error))

    def _storable(self, extra: dict) -> dict:
        """Returns ``extra`` when the stores can hold it, else raises ValueError.

        Run at record time for payloads the user builds (metadata, Orbax
        entries, ``record(**extra)``): one the store cannot encode (a cycle,
        a tuple key, an object whose ``str()`` raises, a lone surrogate)
        must be rejected here, not fail the writer's batch later.
        """
        check_extra(extra)
        return extra

    def _record(self, kind: Kind, when: Any, step: Any = None,
                extra: Optional[dict] = None) -> None:
        """Validates and enqueues one event. Never raises unless strict."""
        try:
            if when is None:
                t = write_time = self._clock()
            else:
                # Fast path for the common backfill (a float from time.time()):
                # t - t is 0.0 exactly for finite floats, NaN for NaN and inf.
                t = when if type(when) is float and when - when == 0.0 else to_timestamp(when)
                write_time = self._clock()
            if type(step) is int:
                if not INT64_MIN <= step <= INT64_MAX:
                    step = _bad_step(step)  # raises: the store holds 64-bit steps
            elif step is not None or kind in _STEP_REQUIRED:
                step = _bad_step(step)
        except Exception as exc:  # bad input, or a broken clock: never break training
            self._reject(kind, exc)
            return
        if when is not None:  # a given time: is it a time-zone offset away from the clock?
            try:
                if not -MIN_OFFSET_S <= t - write_time <= MIN_OFFSET_S:
                    self._check_zone_offset(kind, t, write_time)
            except Exception:  # a clock that returns no number is the writer's problem
                pass
        self._emit(int(kind), t, step, extra, write_time)

    def _record_now_pair(self, first: Kind, second: Kind) -> None:
        """Two events at one clock read (a blocking load's start or end and its
        blocking span's): as two ``_record(kind, None)`` calls, one read cheaper."""
        try:
            t = self._clock()
        except Exception as exc:  # a broken clock: never break training
            self._reject(first, exc)
            return
        self._emit(int(first), t, None, None, t)
        self._emit(int(second), t, None, None, t)

    def _record_since(self, first: Kind, second: Kind, start: float) -> None:
        """A span from ``start`` (a time this recorder's clock gave) to now:
        ``first`` at ``start``, ``second`` now, at one clock read (an adapter's
        blocking load: its input stall). As ``_record(first, start)`` then
        ``_record(second, None)``, cheaper; a start that is not a finite float
        takes that path (validated, counted)."""
        if type(start) is not float or start - start != 0.0:
            self._record(first, start)
            self._record(second, None)
            return
        try:
            t = self._clock()
        except Exception as exc:  # a broken clock: never break training
            self._reject(first, exc)
            return
        self._emit(int(first), start, None, None, t)
        self._emit(int(second), t, None, None, t)

    def _record_stall_then_step(self, start: float, end: float, step: int) -> None:
        """A load's input stall ``[start, end]`` (times this recorder's clock
        gave) and the start of ``step`` now: what a PyTorch loop on the CPU
        records between two steps. As the three typed calls; with a journal,
        :mod:`goodput_core.record.hot_calls` writes the three in one call."""
        self._record(Kind.INPUT_STALL_START, start)
        self._record(Kind.INPUT_STALL_END, end)
        self.record_step_start_time(step)

    def _check_zone_offset(self, kind: Kind, t: float, clock: float) -> None:
        """Warns once per recorder about a time shifted by a time-zone offset
        (:mod:`goodput_core.record.zone_offset`); the event is kept either way."""
        if self._zone_warned:
            return
        hours = zone_offset_hours(t, clock)
        if hours is None:
            return
        self._zone_warned = True
        logger.warning(
            "goodput: run %r: a %s time is %+g h away from the recorder's clock, a "
            "time-zone offset. A naive datetime is local time (datetime.now()); "
            "datetime.utcnow() or a naive time of another zone shifts events out of "
            "the job. Pass an aware datetime. The event is kept; this is said once.",
            self.run, kind.name.lower(), hours)

    def _record_orbax(self, extra: dict, start: Any, step: Any) -> None:
        if start is not None:
            self._record(Kind.CHECKPOINT_STATS, start, step, extra)
            return
        # No start time: the calculator ends the span at the entry's write time.
        try:
            write_time = self._clock()
            if step is not None and type(step) is not int:
                step = _bad_step(step)
        except Exception as exc:
            self._reject(Kind.CHECKPOINT_STATS, exc)
            return
        self._emit(int(Kind.CHECKPOINT_STATS), math.nan, step, extra, write_time)

    def record(self, kind: Kind, time: Any = None, step: Any = None, **extra: Any) -> None:  # noqa: A002
        """Records an event of any kind (the typed methods wrap this).

        Args:
          kind: a :class:`goodput_core.events.Kind`.
          time: POSIX seconds or a datetime (naive = local time); None = now.
          step: the step number for kinds that have one.
          **extra: further payload keys (JSON-serialisable).
        """
        try:
            kind = Kind(kind)
        except Exception:
            if self._strict:
                raise ValueError(f"unknown event kind {kind!r}") from None
            self._rejected["unknown_kind"] += 1
            return
        if extra:
            try:
                extra = self._storable(extra)
            except ValueError as exc:
                self._reject(kind, exc)
                return
        self._record(kind, time, step, extra or None)

    def close(self, timeout: Optional[float] = 10.0) -> bool:
        """Flushes and stops the writer. Later ``record_*`` calls are dropped.

        Events the store did not take within ``timeout`` stay in the spill
        file (logged), delivered by a later :meth:`flush` or the next process
        that opens the store; an embedded store is checkpointed into its one file.
        """
        ok = self.flush(timeout)
        self._closed = True
        if self._store is not None:
            self._emit = self._emit_after_close  # type: ignore[method-assign]
        self._writer.close(ok)
        checkpoint = getattr(self._store, "checkpoint", None)
        if ok and callable(checkpoint):
            try:
                checkpoint()
            except Exception:  # noqa: BLE001 - the file stays valid with its -wal beside
                logger.debug("goodput: checkpoint failed", exc_info=True)
        return ok

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class NullRecorder(PhaseMixin):
    """A recorder that records nothing (the disabled state: not ``None``)."""

    run = job_name = ""
    process_index = 0
    dropped = 0

    def _record(self, kind, when, step=None, extra=None) -> None:
        return None

    def record(self, kind, time=None, step=None, **extra) -> None:
        return None

    def flush(self, timeout: Optional[float] = 10.0) -> bool:
        return True

    def close(self, timeout: Optional[float] = 10.0) -> bool:
        return True

    def stats(self) -> Dict[str, Any]:
        return empty_stats()


NULL_RECORDER = NullRecorder()


def _store_for_writer(store: Any) -> Store:
    """An open Store as is; a URL is validated here and opened by the writer thread."""
    if isinstance(store, Store):
        return store
    url, _, _ = check_store_url(store, writer=True)
    return DeferredStore(url)


hooks.install()  # exit and fork hooks, registered after everything imported above
