"""Exit and fork handling shared by the stores that send from a background thread.

The Cloud Logging and PostgreSQL stores queue events and deliver them from a
sender thread of their own. Two moments need care:

* **Interpreter exit**: the recorders' queues are pushed into the stores
  first, then every live store delivers what it can within a bounded time
  and leaves the rest in its spill file (:meth:`close`).
* **``os.fork()``**: threads and network connections do not survive into the
  child, so each live store rebuilds its per-process state there
  (``_after_fork_in_child``) and never touches the parent's connections.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import time
import weakref

__all__ = ["track", "EXIT_TIMEOUT_S"]

logger = logging.getLogger("goodput")

#: How long the exit hook waits for the stores' deliveries, all together.
EXIT_TIMEOUT_S = 5.0
_LIVE: "weakref.WeakSet" = weakref.WeakSet()


def track(store) -> None:
    """Registers a store for the exit and after-fork hooks.

    The store provides ``close(timeout)``, ``_after_fork_in_child()``, a
    ``_closed`` flag and a ``url`` (for messages).
    """
    _LIVE.add(store)


def _close_all() -> None:
    """At exit: push the recorders' queues into the stores, then deliver (bounded)."""
    recorder = sys.modules.get("goodput_core.recorder")
    if recorder is not None:  # its own atexit hook runs after ours (LIFO)
        try:
            recorder.flush_all(EXIT_TIMEOUT_S)
        except Exception:
            pass
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    for store in list(_LIVE):
        try:
            store.close(max(0.0, deadline - time.monotonic()))
        except Exception:
            logger.exception("goodput: closing %s at exit failed", store.url)


def _after_fork_in_child() -> None:
    for store in list(_LIVE):
        if not store._closed:
            store._after_fork_in_child()


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
