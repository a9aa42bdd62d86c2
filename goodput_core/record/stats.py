"""The recorder's ``stats()``: where every recorded event is, and why one was dropped.

Keys:

* ``written``: stored (handed to the store; a store that delivers in the
  background reports its own delivery under ``store``).
* ``queued``: events waiting in memory for the writer; ``waiting``: the same
  plus a batch being written or retried.
* ``spilled``: this writer's events waiting in its spill file because the
  store could not be opened or refused writes (``spill_file``: its path);
  delivered by this process once the store answers, else by the next one
  that opens it (:mod:`goodput_core.record.spill`). ``spilled_total``:
  spilled so far; ``spill_delivered``: delivered from spill files (this
  writer's and adopted ones); ``spill_waiting``: waiting in every file this
  writer holds; ``spill_adopted``: left by earlier processes, taken over here.
* ``journal``: this writer's journal file (events durable at return,
  :mod:`goodput_core.record.journal`), None without one; ``journal_error``:
  why there is none where there should be (a spill directory refused, a
  full disk). ``overflowed``: events that found the journal's ring full and
  waited in memory instead (not durable until stored).
* Dropped, and why: ``dropped`` (more than ``queue_size`` events waited for
  the writer: said on stderr at the first drop and at exit; also calls after
  ``close()``), ``rejected`` (bad arguments, per kind), ``unstorable`` (the
  store refused the event's content; the rest of its batch was written),
  ``spill_dropped`` (the spill file reached its bound), ``spill_rejected``
  (spilled lines the store cannot take, set aside in a ``.rejected`` file).
* ``write_errors``: failed attempts (retried); ``spill_errors``: failed
  writes of the spill file (``spill_error``: the last one's reason, e.g. a
  spill directory refused); ``store_error``: why the store cannot be opened
  (else None); ``store``: the store's own counters, when it keeps some
  (PostgreSQL, Cloud Logging).
"""

from __future__ import annotations

from typing import Any, Dict

__all__ = ["recorder_stats", "empty_stats"]

_NO_SPILL = {"spilled": 0, "spilled_total": 0, "spill_delivered": 0, "spill_adopted": 0,
             "spill_waiting": 0, "spill_dropped": 0, "spill_rejected": 0, "spill_file": None}


def empty_stats() -> Dict[str, Any]:
    """The counters of a recorder that recorded nothing."""
    out = {"written": 0, "dropped": 0, "overflowed": 0, "journal": None, "journal_error": None,
           "rejected": {}, "unstorable": 0, "write_errors": 0, "queued": 0, "waiting": 0,
           "spill_errors": 0, "spill_error": None, "store_error": None}
    out.update(_NO_SPILL)
    return out


def recorder_stats(rec: Any) -> Dict[str, Any]:
    """The counters of ``rec`` (a :class:`~goodput_core.record.recorder.Recorder`:
    its writer's, :class:`~goodput_core.record.writer.Writer`, and its own)."""
    writer = rec._writer
    outbox = writer.outbox
    pending = writer.pending
    ring = writer.ring
    queued = ring.waiting()
    journal = ring.journal
    out = {
        "written": writer.appender.written,
        "dropped": ring.dropped + rec._dropped_closed,
        "overflowed": ring.overflowed,
        "journal": None if journal is None or journal.released else journal.path,
        "journal_error": writer.journal_error,
        "rejected": dict(rec._rejected),
        "unstorable": writer.appender.unstorable,
        "write_errors": writer.appender.write_errors,
        "queued": queued,
        "waiting": queued + len(pending or ()),
        "spill_errors": writer.spill_errors,
        "spill_error": writer.spill_error,
        "store_error": writer.store_error(),
    }
    out.update(outbox.stats() if outbox is not None else _NO_SPILL)
    store_stats = getattr(rec._store, "stats", None)
    if callable(store_stats):
        try:
            own = store_stats()
        except Exception:  # noqa: BLE001 - counters must never raise
            own = None
        if own is not None:
            out["store"] = own
    return out
