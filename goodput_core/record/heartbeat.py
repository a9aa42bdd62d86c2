"""The lead writer's heartbeat (semantics.md rule 15).

While a job is running (a job start was written and no job end after it),
the writer thread of the lead recorder (process index 0) appends one
``heartbeat_time`` event every ``heartbeat_seconds`` (default 10,
``GOODPUT_HEARTBEAT_SECONDS``; ``0`` or ``off`` turns it off): the first
right after the batch holding the job start is stored, then at most one per
interval, measured on the recorder's clock. The training thread never does
any of it. Readers tell a run that stopped (SIGKILL, a lost host: no sign of
life for 3 intervals) from one that is alive inside a long step
(:mod:`goodput_core.timeline.liveness`). The reference ignores the kind.
A heartbeat that cannot be stored is dropped (the next one is due at once):
it is never retried or spilled, and never counted as a written event.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

from goodput_core.events import HEARTBEAT_SECONDS, EventRecord, Kind
from goodput_core.settings import parse_seconds
from goodput_core.stores.event_batch import EventBatch

__all__ = ["Heartbeat", "heartbeat_seconds", "DEFAULT_HEARTBEAT_SECONDS", "ENV"]

logger = logging.getLogger("goodput")

ENV = "GOODPUT_HEARTBEAT_SECONDS"
DEFAULT_HEARTBEAT_SECONDS = 10.0
_OFF = frozenset({"0", "off", "false", "no", "none"})
_JOB_START, _JOB_END = int(Kind.JOB_START), int(Kind.JOB_END)


def heartbeat_seconds(value: Any = None) -> float:
    """The heartbeat interval: ``value``, else ``GOODPUT_HEARTBEAT_SECONDS``,
    else 10; 0 means off.

    Raises:
      ValueError: a negative, NaN, infinite or unreadable value.
    """
    name = "heartbeat_seconds"
    if value is None:
        value, name = os.environ.get(ENV), ENV
        if value is None or not value.strip():
            return DEFAULT_HEARTBEAT_SECONDS
    if isinstance(value, str) and value.strip().lower() in _OFF:
        return 0.0
    if not isinstance(value, str) and not isinstance(value, bool) and value == 0:
        return 0.0
    seconds = parse_seconds(value, name)
    return DEFAULT_HEARTBEAT_SECONDS if seconds is None else seconds


class Heartbeat:
    """Writer-thread state of the heartbeat (one per recorder and process)."""

    __slots__ = ("interval", "active", "last", "written")

    def __init__(self, interval: float):
        self.interval = float(interval)
        self.active = False   # a job start was written and no job end after it
        self.last: Optional[float] = None
        self.written = 0

    def observe(self, batch: Any) -> None:
        """Follows job starts and ends as the writer drains them (``batch``: an
        EventBatch, or EventRecords): the last of them in the batch decides."""
        if isinstance(batch, EventBatch):
            kind = batch.kind
            found = ((kind == _JOB_START) | (kind == _JOB_END)).nonzero()[0]
            if len(found):
                self.active = int(kind[found[-1]]) == _JOB_START
            return
        for event in batch:
            if event[1] == _JOB_START:
                self.active = True
            elif event[1] == _JOB_END:
                self.active = False

    def beat(self, writer: Any) -> None:
        """Appends a heartbeat when one is due (called by the writer thread
        after each drain, with its :class:`~goodput_core.record.writer.Writer`;
        never raises)."""
        if not self.active or writer.pending is not None or writer.process_index() != 0:
            return
        try:
            now = float(writer.clock())
        except Exception:  # a broken clock is the events' problem, not ours
            return
        if self.last is not None and now - self.last < self.interval:
            return
        event = EventRecord(writer.run, int(Kind.HEARTBEAT), now, None,
                            {HEARTBEAT_SECONDS: self.interval}, writer.process_index(),
                            writer.host, writer.pid, writer.attempt, writer.ring.nothing(), now)
        try:
            writer.store.append([event])
        except Exception as exc:  # noqa: BLE001 - the next one will tell
            logger.debug("goodput: heartbeat not stored: %s", exc)
            return
        self.last = now
        self.written += 1
