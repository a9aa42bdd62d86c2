"""Delivering what dead writers left, from any process that reads a store.

A writer killed before it stored everything leaves its journal (and maybe
spill files) behind: the next writer that opens the same store delivers
them first. A reader need not wait for one: :func:`deliver_left_events`
(which the ``goodput`` commands that read a store call first) adopts the
journals and spill files that no live process holds and delivers them,
exactly once (each file is locked while one process delivers it, and the
stores keep each (writer, sequence) pair once).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from goodput_core.record.journal import SUFFIX, default_spill_dir, tag_of
from goodput_core.record.recorder import Recorder
from goodput_core.stores import check_store_url, schemes

__all__ = ["deliver_left_events", "has_left_events"]

logger = logging.getLogger("goodput")


def has_left_events(store_url: str) -> bool:
    """True when a journal or spill file for ``store_url`` lies in the spill
    directory (a directory listing; nothing is opened)."""
    try:
        names = os.listdir(default_spill_dir())
    except OSError:
        return False
    tag = tag_of(store_url) + "."
    return any(n.startswith(tag) and (n.endswith(SUFFIX) or n.endswith(".jsonl")) for n in names)


def deliver_left_events(store_url: Any, timeout: float = 10.0) -> bool:
    """Delivers the events that dead writers of ``store_url`` left unstored.

    Does nothing (and opens nothing) when none were left, for an in-process
    ``memory://`` store, or for an embedded store this user may not write.

    Args:
      store_url: the store's URL or path.
      timeout: seconds to wait for the delivery at most.

    Returns:
      True when nothing is left to deliver.
    """
    try:
        url, _, _ = check_store_url(store_url)
    except Exception:  # noqa: BLE001 - the command reports a bad URL itself
        return False
    scheme = schemes.scheme_of(url)[0]
    if not scheme.shared or not has_left_events(url):
        return True
    if not scheme.may_write(url):
        return False  # a reader that may not write leaves them to a writer
    # A writer of no run: it adopts and delivers what was left, and records nothing.
    rec = Recorder("goodput-adopter", url, durable=False, hang_detection=False,
                   heartbeat_seconds=0)
    try:
        ok = rec.flush(timeout)
    finally:
        rec.close(0)
    if not ok:
        logger.warning("goodput: events left by a dead writer of %s are not all delivered "
                       "yet; the next writer delivers them", rec._store.url)
    return ok
