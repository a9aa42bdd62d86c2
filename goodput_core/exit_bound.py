"""The one bound on the time goodput spends at interpreter exit.

Every exit hook (the recorders' last flush, the background stores' delivery,
the embedded store's checkpoint) takes what is left of one shared deadline,
set when the first of them runs: ``GOODPUT_EXIT_TIMEOUT_S`` seconds (default
5) in total, whatever the stores do. What is not stored by then stays in
local spill files and is delivered by the next process that opens the store.
"""

from __future__ import annotations

import os
import time
from typing import Optional

__all__ = ["EXIT_TIMEOUT_ENV", "DEFAULT_EXIT_TIMEOUT_S", "exit_timeout_s", "remaining"]

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
