"""The recorder's process-wide hooks: flush at exit, before a read, around fork.

Every live :class:`~goodput_core.record.recorder.Recorder` of the process is in
:data:`_LIVE`. :func:`flush_all` runs at interpreter exit (``atexit``) and from
``multiprocessing``'s own exit finalizers, which a multiprocessing child runs
before ``os._exit`` (no atexit there). :func:`flush_before_read` gives a query
read-your-writes. After ``os.fork()`` each recorder resets in the child (fresh
queue, writer and attempt id). Recorders are reached by duck typing (``flush``,
``has_unstored``, ``_after_fork_in_child``): this module imports no recorder.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import time
import weakref
from typing import Any, Optional

from goodput_core import exit_bound

__all__ = ["flush_all", "flush_at_exit", "flush_before_read", "READ_FLUSH_TIMEOUT_S"]

logger = logging.getLogger("goodput")

#: Every live recorder of this process (weak: a recorder no one holds is gone).
_LIVE: "weakref.WeakSet[Any]" = weakref.WeakSet()

_EXIT_FLUSH_TIMEOUT_S = 10.0  # flush_all() called by hand; the exit hooks share exit_bound
#: The longest a query waits for this process's unstored events (seconds).
READ_FLUSH_TIMEOUT_S = 5.0


def register(recorder: Any) -> None:
    """Adds a new recorder to the live set and hooks multiprocessing's exit when loaded."""
    _LIVE.add(recorder)
    _flush_at_multiprocessing_exit()


def flush_all(timeout: float = _EXIT_FLUSH_TIMEOUT_S) -> bool:
    """Flushes every live recorder of this process within ``timeout`` seconds in all."""
    deadline = time.monotonic() + timeout
    ok = True
    for rec in list(_LIVE):
        remaining = max(0.0, deadline - time.monotonic())
        try:
            ok = rec.flush(remaining) and ok
        except Exception:
            ok = False
    return ok


def flush_at_exit() -> bool:
    """The exit hook: flushes every recorder within what is left of the exit
    bound (:mod:`goodput_core.exit_bound`, 5 s in total by default), leaves
    what is still unstored in spill files (saying so on stderr) and
    checkpoints embedded stores. Idempotent: every exit hook may call it."""
    ok = flush_all(exit_bound.remaining())
    for rec in list(_LIVE):
        try:
            rec._leave_spilled()
        except Exception:
            logger.debug("goodput: spilling at exit failed", exc_info=True)
        checkpoint = getattr(getattr(rec, "_store", None), "checkpoint", None)
        if ok and callable(checkpoint) and exit_bound.remaining() > 0:
            try:
                checkpoint()
            except Exception:  # the file stays valid with its -wal beside it
                logger.debug("goodput: checkpoint at exit failed", exc_info=True)
    return ok


def flush_before_read(run: str, store: Any, timeout: Optional[float] = None) -> bool:
    """Read-your-writes: stores what this process recorded for ``run`` in ``store``.

    Called by the calculators before they read a store, so a query right
    after ``record_job_end_time()`` in the same process sees it. Only this
    process's recorders of that run writing to that store (the same object,
    or one with the same URL) that still hold unstored events are flushed;
    with nothing pending this costs a scan of the live recorders and no wait.

    Args:
      run: the run about to be read.
      store: the Store about to be read.
      timeout: seconds to wait at most in all (default
        :data:`READ_FLUSH_TIMEOUT_S`): a store that is down must not hang a
        query; what is not stored by then is read next time.

    Returns:
      True when everything recorded before the call is stored.
    """
    url = getattr(store, "url", None)
    deadline = time.monotonic() + (READ_FLUSH_TIMEOUT_S if timeout is None else timeout)
    ok = True
    for rec in list(_LIVE):
        own = rec._store
        if (own is None or rec.run != run or not (own is store or (url and own.url == url))
                or rec._pid != os.getpid() or not rec.has_unstored()):
            continue
        try:
            ok = rec.flush(max(0.0, deadline - time.monotonic())) and ok
        except Exception:
            ok = False
    return ok


def _after_fork_in_child() -> None:
    for rec in list(_LIVE):
        try:
            rec._after_fork_in_child()
        except Exception:
            logger.exception("goodput: could not reset a recorder after fork")


class _Token:
    """A weak-referenceable key for multiprocessing's after-fork registry."""


_MP_TOKEN = _Token()
_mp_hooked = {"pid": 0, "after_fork": False}


def _flush_at_multiprocessing_exit(_token: Any = None) -> None:
    """Registers :func:`flush_all` as a multiprocessing exit finalizer in this process.

    A multiprocessing child runs ``multiprocessing.util._exit_function`` (the
    finalizers) after its target returns and then calls ``os._exit``: atexit
    never runs there. A fork child starts with the registry emptied, so the
    after-fork hook (kept across forks) registers again in each child; a spawn
    child registers when its first recorder is created. Does nothing until
    the program has imported multiprocessing (checked at each recorder
    creation and before each fork), so ``import goodput_core`` stays light.
    """
    util = sys.modules.get("multiprocessing.util")
    if util is None or _mp_hooked["pid"] == os.getpid():
        return
    try:
        util.Finalize(None, flush_at_exit, exitpriority=10)
        if not _mp_hooked["after_fork"]:
            util.register_after_fork(_MP_TOKEN, _flush_at_multiprocessing_exit)
            _mp_hooked["after_fork"] = True
        _mp_hooked["pid"] = os.getpid()
    except Exception:  # a multiprocessing without these hooks: atexit still covers the rest
        logger.debug("goodput: no multiprocessing exit hook", exc_info=True)


_installed = []


def install() -> None:
    """Registers the exit and fork hooks, once per process (the recorder module
    calls this at the end of its import: the hooks run in the same order relative
    to the modules the recorder imports as before they moved here)."""
    if _installed:
        return
    _installed.append(True)
    atexit.register(flush_at_exit)
    # the exit hook of the stores that send from a thread calls this first (when it
    # runs before ours: atexit is LIFO), so the recorders' queues reach them before
    # they deliver; flush_at_exit is idempotent
    exit_bound.before_stores_close.append(flush_at_exit)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_flush_at_multiprocessing_exit,
                            after_in_child=_after_fork_in_child)
