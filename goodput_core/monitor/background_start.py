"""Starting something slow (a monitor and its exporters) off the caller's thread.

Building a monitor imports TensorBoard and Prometheus clients, opens the
store and creates directories: hundreds of milliseconds that, on the
training thread, would be badput the tool itself creates (docs/quality.md P9).
The framework shims start their monitors through :class:`BackgroundStart`:
the caller pays for one thread start; the work and its errors (logged, not
raised) happen on that thread, and the stop waits for it, bounded.

Example::

    start = BackgroundStart("goodput-monitor-start", build_and_start)
    start.begin()                      # returns at once
    ...
    monitor = start.finish(timeout=10) # the result, or None (failed, too late)
    if monitor is not None:
        monitor.stop()
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Generic, Optional, TypeVar

__all__ = ["BackgroundStart"]

logger = logging.getLogger("goodput")

T = TypeVar("T")


class BackgroundStart(Generic[T]):
    """Runs ``start()`` once on a daemon thread.

    Args:
      name: the thread's name (and the subject of log messages).
      start: builds and starts something; returns what :meth:`finish` hands back.
      abandon: called with the result when ``start`` finishes after
        :meth:`finish` gave up on it (stop what it started); never raises.
    """

    def __init__(self, name: str, start: Callable[[], T],
                 abandon: Optional[Callable[[T], Any]] = None):
        self.name = name
        self._start = start
        self._abandon = abandon
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._result: Optional[T] = None
        self._given_up = False
        #: The exception ``start`` raised, if it did.
        self.error: Optional[BaseException] = None

    def begin(self) -> "BackgroundStart[T]":
        """Starts the thread (idempotent); returns at once."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
        return self

    def _run(self) -> None:
        time.sleep(0)  # hand the GIL back: begin() returns before the work runs
        try:
            result = self._start()
        except BaseException as exc:  # noqa: BLE001 - the caller's thread must not see it
            self.error = exc
            logger.warning("goodput: %s failed; continuing without it (%s: %s)", self.name,
                           type(exc).__name__, exc, exc_info=True)
            result = None
        with self._lock:
            late = self._given_up
            if not late:
                self._result = result
            self._done.set()
        if late and result is not None and self._abandon is not None:
            try:
                self._abandon(result)
            except Exception:  # noqa: BLE001 - best effort after the caller left
                logger.warning("goodput: %s: stopping a late start failed", self.name,
                               exc_info=True)

    @property
    def done(self) -> bool:
        """True once ``start`` returned or raised."""
        return self._done.is_set()

    def wait(self, timeout: Optional[float] = None) -> Optional[T]:
        """Waits for ``start`` up to ``timeout`` seconds; its result or None."""
        self._done.wait(timeout)
        return self._result

    def finish(self, timeout: Optional[float] = None) -> Optional[T]:
        """Waits for ``start`` up to ``timeout``; then takes its result.

        Returns:
          The result, or None when ``start`` failed, never began, or did not
          finish in time (it is then stopped with ``abandon`` when it does).
        """
        if self._thread is None:
            return None
        if self._thread is not threading.current_thread():
            self._done.wait(timeout)
        with self._lock:
            if not self._done.is_set():
                self._given_up = True
                logger.warning("goodput: %s did not finish within %s s; abandoned", self.name,
                               timeout)
                return None
            result, self._result = self._result, None
            return result
