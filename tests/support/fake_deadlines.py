"""Monitor deadlines reached without sleeping (``Monitor(deadlines=...)``)."""

from __future__ import annotations

import threading
import time
from typing import Callable, List, Optional, Set

from goodput_core.monitor.runner import Deadlines

GUARD_S = 30.0  # how long a wait may see neither its event nor a settled state


class FakeDeadlines(Deadlines):
    """Deadline time that jumps to the end of a wait instead of sleeping.

    A wait returns as soon as its event is set. While it is not, it asks
    ``settled()`` ("nothing that could still set it is running", see
    :func:`monitor_settled`); once that holds, the clock jumps by the wait's
    timeout and the wait reports the event's state then. So a timeout is
    reached exactly when it would be in real time, whatever the machine's
    load, without the wait. ``expired`` lists the timeouts reached.
    """

    def __init__(self, settled: Optional[Callable[[], bool]] = None, start: float = 100.0):
        self.now = float(start)
        self.settled = settled  # set it once the monitor exists
        self.expired: List[float] = []

    def monotonic(self) -> float:
        return self.now

    def wait(self, event: threading.Event, timeout: Optional[float]) -> bool:
        give_up = time.monotonic() + GUARD_S
        # short event waits: what the wait depends on runs on other threads
        while not event.wait(0.002):
            if timeout is not None and self.settled():
                # the event may have been set just before the last thread that
                # could set it finished: settled, yet no timeout was reached
                if event.is_set():
                    return True
                self.now += timeout
                self.expired.append(timeout)
                return event.is_set()
            assert time.monotonic() < give_up, "neither set nor settled: a hang in the test"
        return True


class Parking:
    """Where a test's stuck exporter or store blocks until ``release`` is set;
    ``threads``: the threads blocked here now."""

    def __init__(self):
        self.release = threading.Event()
        self.threads: Set[int] = set()

    def block(self) -> bool:
        me = threading.get_ident()
        self.threads.add(me)
        try:
            return self.release.wait(GUARD_S)
        finally:
            self.threads.discard(me)


def monitor_settled(monitor, *parkings: Parking) -> Callable[[], bool]:
    """``settled`` for ``monitor``: each exporter's worker is idle or blocked in
    one of ``parkings``, and so is any final-cycle worker still running."""

    def settled() -> bool:
        parked = set().union(*(p.threads for p in parkings))
        for runner in monitor._runners:
            if runner.busy and runner._thread.ident not in parked:
                return False
        return all(t.ident in parked for t in threading.enumerate()
                   if t.name == f"goodput-flush-{monitor.run}" and t.is_alive())

    return settled
