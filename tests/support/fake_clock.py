"""A clock the test moves by hand: no sleeps, exact durations."""

from __future__ import annotations


class FakeClock:
    """Returns ``t``; :meth:`advance` moves it forward."""

    def __init__(self, start: float = 1_000.0):
        self.t = float(start)

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds
