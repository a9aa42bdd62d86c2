"""Constructors that block until the test releases them (docs/quality.md P9 tests).

``gate = block_constructor(monkeypatch, module, "ClassName")`` replaces the
class in ``module`` by a subclass whose ``__init__`` records its thread, sets
``gate.opening`` and waits for ``gate.release`` before building the real
object. A test then shows that the caller's call returned while the
construction was still blocked, and on which thread it ran; no timing.
``only(*args, **kwargs)`` picks the constructions to block (e.g. the test's
own path): others, such as a store a recorder left by another test opens
late, go through unblocked and unrecorded.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, List, Optional


class Gate:
    """Events and records of one blocked class."""

    def __init__(self) -> None:
        self.opening = threading.Event()
        self.release = threading.Event()
        self.threads: List[int] = []


def block_constructor(monkeypatch: Any, module: Any, name: str, limit_s: float = 60.0,
                      only: Optional[Callable[..., bool]] = None) -> Gate:
    """Blocks the constructions of ``module.<name>`` (those ``only`` picks, by
    default all) until ``gate.release``."""
    gate = Gate()
    real = getattr(module, name)

    class Blocked(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if only is not None and not only(*args, **kwargs):
                super().__init__(*args, **kwargs)
                return
            gate.threads.append(threading.get_ident())
            gate.opening.set()
            if not gate.release.wait(limit_s):
                raise AssertionError("the test never released the constructor")
            super().__init__(*args, **kwargs)

    Blocked.__name__ = Blocked.__qualname__ = real.__name__
    monkeypatch.setattr(module, name, Blocked)
    return gate
