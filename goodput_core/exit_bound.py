"""The one bound on the time goodput spends at interpreter exit.

Every exit hook (the recorders' last flush, the background stores' delivery,
the embedded store's checkpoint) takes what is left of one shared deadline,
set when the first of them runs: ``GOODPUT_EXIT_TIMEOUT_S`` seconds (default
5) in total, whatever the stores do. What is not stored by then stays in
local spill files and is delivered by the next process that opens the store.

The exit hooks of two layers meet here: the stores that send from a thread of
their own (``stores/background.py``) first run what the layers above registered
in :data:`before_stores_close` (the recorders' exit flush, ``record/hooks.py``),
so that the recorders' queues reach those stores before they deliver; a store
never looks a higher layer up.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, List, Optional

__all__ = ["EXIT_TIMEOUT_ENV", "DEFAULT_EXIT_TIMEOUT_S", "exit_timeout_s", "remaining",
           "before_stores_close", "run_before_stores_close"]

logger = logging.getLogger("goodput")

EXIT_TIMEOUT_ENV = "GOODPUT_EXIT_TIMEOUT_S"
DEFAULT_EXIT_TIMEOUT_S = 5.0
_deadline: Optional[float] = None
_pid = 0


def exit_timeout_s() -> float:
    """``$GOODPUT_EXIT_TIMEOUT_S`` when it is a number >= 0, else 5."""
    try:
        value = float(os.environ.get(EXIT_TIMEOUT_ENV, DEFAULT_EXIT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_EXIT_TIMEOUT_S
    return value if value >= 0 else DEFAULT_EXIT_TIMEOUT_S


def remaining() -> float:
    """Seconds left of this process's exit budget (the clock starts at the first call)."""
    global _deadline, _pid
    if _deadline is None or _pid != os.getpid():  # a forked child has a budget of its own
        _deadline, _pid = time.monotonic() + exit_timeout_s(), os.getpid()
    return max(0.0, _deadline - time.monotonic())


#: Called, in order, by the background stores' exit hook before they deliver
#: what they hold: each takes what is left of the exit bound itself. The record
#: layer appends its exit flush (``record/hooks.py``: the recorders' queues go
#: into the stores first).
before_stores_close: List[Callable[[], Any]] = []


def run_before_stores_close() -> None:
    """Runs :data:`before_stores_close` (a hook that fails is logged and skipped)."""
    for hook in list(before_stores_close):
        try:
            hook()
        except Exception:  # noqa: BLE001 - the stores still close
            logger.debug("goodput: exit hook %r failed", hook, exc_info=True)
