"""When the monitor's parts are due: which are on, their intervals, the next times.

A :class:`~goodput_core.monitor.loop.Monitor` *has* one :class:`Schedule`:
``configure()`` switches parts on and off (from any thread), the loop asks
how long to wait (:meth:`Schedule.delay`) and which parts are due
(:meth:`Schedule.take_due`, which plans each one's next time: no catch-up
bursts after a slow cycle).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Optional, Tuple

__all__ = ["Schedule"]

_EPS = 1e-6  # schedule slack: clock + (due - clock) may miss `due` by an ulp


class Schedule:
    """The parts a cycle computes and when each is next due.

    Args:
      intervals: seconds between cycles of each part (``"goodput"``,
        ``"step_deviation"``, ``"rolling"``), validated by the monitor.
    """

    def __init__(self, intervals: Dict[str, float]):
        self.intervals = intervals
        self._lock = threading.Lock()
        self._windows: Tuple[Any, ...] = ()
        self._enabled: set = set()
        self._next: Dict[str, float] = {}

    @property
    def parts(self) -> frozenset:
        """The parts a cycle computes now."""
        with self._lock:
            return frozenset(self._enabled)

    @property
    def windows(self) -> Tuple[Any, ...]:
        """The rolling window sizes in seconds."""
        with self._lock:
            return self._windows

    @property
    def idle(self) -> float:
        """The shortest interval: the loop's wait with no part on."""
        return min(self.intervals.values())

    def configure(self, now: float, goodput: Optional[bool], step_deviation: Optional[bool],
                  windows: Optional[Tuple[Any, ...]]) -> None:
        """Switches parts on or off (None: unchanged); a part switched on is
        first due one interval from ``now``; windows on when not empty."""
        with self._lock:
            if windows is not None:
                self._windows = windows
            wanted = {"goodput": goodput, "step_deviation": step_deviation,
                      "rolling": None if windows is None else bool(windows)}
            for part, on in wanted.items():
                if on and part not in self._enabled:
                    self._enabled.add(part)
                    self._next[part] = now + self.intervals[part]
                elif on is False:
                    self._enabled.discard(part)

    def due_now(self, now: float) -> None:
        """Every enabled part is due at ``now`` at the latest (the loop's first
        cycle runs at start)."""
        with self._lock:
            for p in self._enabled:
                self._next[p] = min(self._next[p], now)

    def delay(self, clock: Callable[[], float]) -> float:
        """Seconds until the next part is due (the idle wait with none on)."""
        with self._lock:
            due_times = [self._next[p] for p in self._enabled]
        return max(0.0, min(due_times) - clock()) if due_times else self.idle

    def take_due(self, now: float) -> set:
        """The parts due at ``now``, each planned one interval from ``now``."""
        with self._lock:
            due = {p for p in self._enabled if self._next[p] <= now + _EPS}
            for p in due:  # no catch-up bursts after a slow cycle
                self._next[p] = now + self.intervals[p]
        return due
