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
* Dropped, and why: ``dropped`` (the memory queue was full, or after
  ``close()``), ``rejected`` (bad arguments, per kind), ``unstorable`` (the
  store refused the event's content; the rest of its batch was written),
  ``spill_dropped`` (the spill file reached its bound).
* ``write_errors``: failed attempts (retried); ``spill_errors``: failed
  writes of the spill file; ``store_error``: why the store cannot be opened
  (else None); ``store``: the store's own counters, when it keeps some
  (PostgreSQL, Cloud Logging).
"""

from __future__ import annotations

from typing import Any, Dict

__all__ = ["recorder_stats", "empty_stats"]

_NO_SPILL = {"spilled": 0, "spilled_total": 0, "spill_delivered": 0, "spill_adopted": 0,
             "spill_waiting": 0, "spill_dropped": 0, "spill_file": None}


def empty_stats() -> Dict[str, Any]:
    """The counters of a recorder that recorded nothing."""
    out = {"written": 0, "dropped": 0, "rejected": {}, "unstorable": 0, "write_errors": 0,
           "queued": 0, "waiting": 0, "spill_errors": 0, "store_error": None}
    out.update(_NO_SPILL)
    return out


def recorder_stats(rec: Any) -> Dict[str, Any]:
    """The counters of ``rec`` (a :class:`~goodput_core.record.recorder.Recorder`)."""
    outbox = rec._outbox
    pending = rec._pending
    queued = list(rec._queue)  # one C call: atomic under the GIL
    queued = len(queued) - sum(1 for item in queued if type(item) is not tuple)  # fences
    out = {
        "written": rec._written,
        "dropped": rec._dropped,
        "rejected": dict(rec._rejected),
        "unstorable": rec._unstorable,
        "write_errors": rec._write_errors,
        "queued": queued,
        "waiting": queued + len(pending or ()),
        "spill_errors": rec._spill_errors,
        "store_error": rec._store_error(),
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
