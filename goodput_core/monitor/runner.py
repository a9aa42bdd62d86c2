"""Deadline time and the per-exporter worker thread of the monitor.

Each exporter runs on its own :class:`Runner` so that one that hangs or
raises never delays the others or the monitor loop (docs/quality.md R5).
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ["Deadlines", "Runner"]


class Deadlines:
    """The time the monitor's deadlines are kept in: a monotonic clock and a
    bounded event wait (``time.monotonic`` and ``Event.wait`` by default).

    Tests inject one whose clock jumps to the end of a wait instead of
    sleeping through it, so a hung exporter's timeout is reached at once.
    """

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, timeout: Optional[float]) -> bool:
        """Waits up to ``timeout`` seconds (None: unbounded); True once ``event`` is set."""
        return event.wait(timeout)

    def after(self, timeout: Optional[float]) -> float:
        """The deadline ``timeout`` seconds from now (None: never)."""
        return math.inf if timeout is None else self.monotonic() + max(0.0, float(timeout))

    def remaining(self, deadline: float) -> Optional[float]:
        """Seconds left until ``deadline``, None when unbounded."""
        return None if deadline == math.inf else max(0.0, deadline - self.monotonic())

    def wait_until(self, event: threading.Event, deadline: float) -> bool:
        return self.wait(event, self.remaining(deadline))


class Runner:
    """A worker thread that runs one exporter's calls, one at a time.

    ``submit`` refuses new work while the previous call is still running:
    that is how a hung exporter is skipped without piling up work.
    """

    def __init__(self, exporter: Any, on_error: Callable[[str, BaseException], None]):
        self.exporter = exporter
        self.name = str(getattr(exporter, "name", None) or type(exporter).__name__)
        self.carry: List[Tuple[int, float]] = []  # deviations it has not received yet
        self.carry_metrics: Dict[str, list] = {}  # metric points it has not received yet
        self._on_error = on_error
        self._cv = threading.Condition()
        self._job: Optional[Tuple[Callable[[], Any], threading.Event]] = None
        self._busy = False
        self._retired = False
        self._thread: Optional[threading.Thread] = None

    @property
    def busy(self) -> bool:
        with self._cv:
            return self._busy

    def submit(self, fn: Callable[[], Any]) -> Optional[threading.Event]:
        """Queues ``fn``; returns an event set when it has run, or None if busy/retired."""
        with self._cv:
            if self._busy or self._retired:
                return None
            done = threading.Event()
            self._job, self._busy = (fn, done), True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name=f"goodput-export-{self.name}", daemon=True)
                self._thread.start()
            self._cv.notify_all()
            return done

    def wait_idle(self, timeout: Optional[float]) -> bool:
        """Waits until no call is running; False on timeout."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._busy, timeout)

    def retire(self) -> None:
        """Lets the thread exit once its current call (if any) has returned."""
        with self._cv:
            self._retired = True
            self._cv.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while self._job is None and not self._retired:
                    self._cv.wait()
                if self._job is None:
                    return
                fn, done = self._job
                self._job = None
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - an exporter must not kill its worker
                self._on_error(f"exporter {self.name}", exc)
            finally:
                with self._cv:  # idle and done together: whoever sees one sees both
                    self._busy = False
                    done.set()
                    self._cv.notify_all()
