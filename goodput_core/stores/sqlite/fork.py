"""Fork safety of the sqlite store: no SQLite connection crosses ``os.fork()``.

Every public store operation runs inside :data:`_GATE`; a fork waits for the
operations in flight, holds new ones back, and closes every connection of
every live store (threads reopen theirs lazily, in parent and child alike).

A fork must never wait on another process: an operation that finds the file
locked by another process does not wait inside SQLite (the store opens its
connections with no busy timeout) but leaves the gate while it sleeps
between attempts (:meth:`_ForkGate.released`). If a fork closed the
connections meanwhile, the operation starts again from the top
(:class:`Reopen`), on a fresh connection.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import weakref

__all__ = ["gated", "register_store", "released", "Reopen"]


class Reopen(Exception):
    """A fork closed the connections while an operation slept: run it again."""

class _ForkGate:
    """Counts store operations in flight so that ``os.fork()`` can wait for none.

    No SQLite connection may cross a fork: the child would inherit half-done
    locks and the parent's per-file lock bookkeeping, which even a connection
    it opens afresh would share. So a fork holds new operations back, waits for
    running ones and closes every connection (threads reopen theirs lazily).
    """

    def __init__(self):
        self.cond = threading.Condition(threading.Lock())
        self.active = 0  # operations running
        self.forks = 0  # forks waiting or under way: new operations wait (no starving)
        self.depth = threading.local()  # a nested operation must not wait for a fork
        self.generation = 0  # forks that closed the connections

    def __enter__(self):
        depth = getattr(self.depth, "n", 0)
        with self.cond:
            while self.forks and not depth:
                self.cond.wait()
            self.active += 1
        self.depth.n = depth + 1

    def __exit__(self, *exc):
        self.depth.n -= 1
        with self.cond:
            self.active -= 1
            self.cond.notify_all()

    @contextlib.contextmanager
    def released(self):
        """Leaves the gate for the block (a sleep between attempts); yields a state
        whose ``reopen`` says, after the block, that a fork closed the connections."""
        n = getattr(self.depth, "n", 0)
        state = _Released(self.generation)
        with self.cond:
            self.active -= n
            self.cond.notify_all()
        try:
            yield state
        finally:
            with self.cond:
                while self.forks:
                    self.cond.wait()
                self.active += n
                state.reopen = self.generation != state.generation

    def before_fork(self) -> None:
        own = getattr(self.depth, "n", 0)  # fork() called from inside an operation
        with self.cond:
            self.forks += 1
            while self.active > own:
                self.cond.wait()
        if not own:  # else a connection is in use here: leave them all, do not deadlock
            self.generation += 1
            for connections in list(_STORES):
                connections.close_all()

    def after_fork_in_parent(self) -> None:
        with self.cond:
            self.forks -= 1
            self.cond.notify_all()


_GATE = _ForkGate()
_STORES: "weakref.WeakSet" = weakref.WeakSet()


class _Released:
    __slots__ = ("generation", "reopen")

    def __init__(self, generation: int):
        self.generation = generation
        self.reopen = False


def gated(method):
    """Runs a public store method inside the fork gate (again after a :class:`Reopen`)."""

    @functools.wraps(method)
    def gated(self, *args, **kwargs):
        while True:
            try:
                with _GATE:
                    return method(self, *args, **kwargs)
            except Reopen:
                if getattr(_GATE.depth, "n", 0):
                    raise  # a nested operation: the outermost one starts again

    return gated


def released():
    """See :meth:`_ForkGate.released` (of the gate of this process)."""
    return _GATE.released()


def _after_fork_in_child() -> None:
    global _GATE
    _GATE = _ForkGate()  # no operation runs in the child yet; forget the parent's count


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=lambda: _GATE.before_fork(), after_in_child=_after_fork_in_child,
                        after_in_parent=lambda: _GATE.after_fork_in_parent())




def register_store(connections) -> None:
    """Makes a store's connections close before every fork (``connections.close_all()``:
    :class:`~goodput_core.stores.sqlite.connections.Connections`)."""
    _STORES.add(connections)
