"""The writer thread's wake-up: an ``Event`` a signal handler cannot wedge.

``threading.Event.set()`` takes a ``Condition``'s lock in Python code. An
exception raised by a signal handler (Ctrl-C's ``KeyboardInterrupt``, a job's
own ``SIGALRM`` or ``SIGTERM`` handler) that lands inside it, after the lock
was taken and before its ``with`` block began, leaves the lock held: the next
``set()`` (the recording call that finds the ring half full, ``flush()``, exit)
then blocks forever, and so does the writer thread waiting on it. Recording
calls wake the writer, and a signal can interrupt them anywhere, so the wake-up
is one plain lock here: every operation is a single C call, which a signal
interrupts before or after, never halfway.
"""

from __future__ import annotations

import _thread
from typing import Optional

__all__ = ["Wakeup"]


class Wakeup:
    """``set()``, ``is_set()``, ``clear()`` and ``wait(timeout)`` of
    ``threading.Event`` for one waiting thread (the writer).

    A set wake-up is a released lock: ``wait`` takes it (and returns at once
    while ``is_set()``); ``clear`` takes it back if it is free. A wake-up seen
    twice is harmless (the writer drains and finds nothing), one lost is not,
    so the flag is set before the lock is released and cleared before it is
    taken back.
    """

    __slots__ = ("_lock", "_flag")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()  # held while not set
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        try:
            self._lock.release()
        except RuntimeError:  # already released: a wake-up is pending
            pass

    def clear(self) -> None:
        self._flag = False
        self._lock.acquire(False)  # take back a pending release, if any

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Returns True when set (now or before ``timeout`` seconds passed)."""
        if self._flag:
            return True
        if timeout is None:
            self._lock.acquire()
        elif timeout > 0:
            self._lock.acquire(True, timeout)
        return self._flag
