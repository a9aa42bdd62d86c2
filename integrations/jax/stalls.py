"""Input stalls: the part of a data load during which the device sat idle.

With asynchronous dispatch a jitted step returns as soon as its work is
enqueued, so the step span (dispatch to dispatch) contains the blocking
``next()`` that follows it, and by position alone that load looks
overlapped. It is overlapped only while the device still runs the step
dispatched before it. This module measures when that step finished:

* the step decorator hands each step's outputs to :meth:`StallWatch.dispatched`;
* a watcher thread blocks on them (``jax.block_until_ready``, which releases
  the GIL) and stamps the time ``f`` at which they became ready, then drops
  its reference to them;
* a load ``[t0, t1)`` on the thread that dispatched the step is an input
  stall over ``[max(t0, f), t1)`` when ``f < t1``: the device was idle from
  the later of the load's start and the step's end until the batch arrived.
  A load whose start finds no step dispatched yet (the first one) is not
  observed: it lies before the first step, where it blocks anyway.

The stall is recorded as an ``input_stall`` start/end pair inside the load's
``data_loading`` pair (readers that do not know the kind see ordinary data
loading). When the load ends before the watcher knows ``f``, the watcher
records the stall later, with the load's own times.

Error bound: ``f`` is stamped when the watcher thread runs again after the
outputs became ready, which can be late by the time it waits for the GIL:
microseconds when the loader waits in C (I/O, sleeps, tf.data, Grain
threads), up to ``sys.getswitchinterval()`` (5 ms by default) per load when
the loader is pure Python holding the GIL. A late ``f`` only shortens a
stall: each stall is under-reported by at most that wait, never
over-reported. Outputs that a later step donated before the watcher reached
them cannot be observed; such loads record no stall (counted in
:attr:`StallWatch.unobserved`).

Costs on the training thread: one queue put per step (only once a load was
observed) and a few attribute reads per load; nothing blocks.

Data-loading events recorded by other adapters (MaxText's
``maybe_record_goodput(recorder, GoodputEvent.DATA_LOADING)``, AXLearn's
``*_DATA_LOADING``) use :func:`begin_observed_load` / :func:`end_observed_load`:
they observe the device through the instrumented JAX adapter when one is
active and tracks the steps (``gjax.train_step``); their frameworks' own
step calls carry no outputs, so without it their loads keep the positional
rule.
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from typing import Any, Callable, List, Optional, Tuple

from goodput_integrations.jax import _active, _probe

__all__ = ["StallWatch", "LoadToken", "begin_observed_load", "end_observed_load",
           "record_stall"]

Sink = Callable[[float, float], None]
# Steps handed to the watcher and not yet ready; beyond this many (the device
# far behind, or the watcher stuck) steps are not handed over: no memory grows.
_MAX_PENDING = 256
_LIVE: "weakref.WeakSet[StallWatch]" = weakref.WeakSet()


class _Step:
    """One dispatched step: its outputs until they are ready, then their time."""

    __slots__ = ("outputs", "thread", "ready_at", "failed", "waiting", "lock")

    def __init__(self, outputs: Any, thread: int):
        self.outputs = outputs
        self.thread = thread
        self.ready_at: Optional[float] = None
        self.failed = False
        self.waiting: List[Tuple[float, float, Sink]] = []
        self.lock = threading.Lock()


LoadToken = Tuple[_Step, float]


def _stall(t0: float, t1: float, ready_at: float, sink: Sink) -> None:
    if ready_at < t1:
        sink(max(t0, ready_at), t1)


class StallWatch:
    """Measures when each dispatched step's outputs became ready (see module doc).

    Args:
      clock: the POSIX-seconds clock that stamps readiness (the adapter's).
      block: waits until a pytree of arrays is ready (default
        ``jax.block_until_ready``; injectable for tests).
    """

    def __init__(self, clock: Callable[[], float],
                 block: Optional[Callable[[Any], Any]] = None):
        self._clock = clock
        self._block = block
        self._latest: Optional[_Step] = None
        self._queue: "queue.SimpleQueue[Optional[_Step]]" = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self.watching = False  # set by the first load: steps are handed over from then on
        self.unobserved = 0
        _LIVE.add(self)

    # ------------------------------------------------- training-thread hooks
    def dispatched(self, outputs: Any) -> None:
        """A step was dispatched; ``outputs`` are its results (never raises)."""
        if not self.watching:
            return
        if self._queue.qsize() >= _MAX_PENDING:
            self._latest = None
            return
        step = _Step(outputs, threading.get_ident())
        self._latest = step
        self._queue.put(step)

    def begin(self, t0: float) -> Optional[LoadToken]:
        """A load starts at ``t0`` on this thread; None when nothing is observed."""
        if not self.watching:
            self._start()
            return None
        step = self._latest
        if step is None or step.thread != threading.get_ident():
            return None
        return step, t0

    def end(self, token: Optional[LoadToken], t1: float, sink: Sink) -> None:
        """The load of ``token`` ended at ``t1``: ``sink(start, end)`` gets its
        stall now, or later from the watcher thread (never raises here)."""
        if token is None:
            return
        step, t0 = token
        ready_at = step.ready_at
        if ready_at is None:
            with step.lock:
                ready_at = step.ready_at
                if ready_at is None:
                    if step.failed:
                        self.unobserved += 1
                    else:
                        step.waiting.append((t0, t1, sink))
                    return
        _stall(t0, t1, ready_at, sink)

    # ----------------------------------------------------------- lifecycle
    def _start(self) -> None:
        with self._lock:
            if self.watching:
                return
            thread = threading.Thread(target=self._run, name="goodput-stall-watch", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # interpreter shutting down
                return
            self._thread = thread
            self.watching = True

    def _forget(self) -> None:
        """In a forked child: the watcher thread did not survive the fork."""
        self.watching = False
        self._latest = None
        self._thread = None
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Waits until the steps handed over so far were observed (and their
        stalls recorded); False on timeout or when not watching."""
        if not self.watching:
            return False
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def stop(self) -> None:
        """Stops the watcher thread once it observed the steps handed over so far
        (idempotent; it does not wait)."""
        with self._lock:
            if not self.watching:
                return
            self.watching = False
            self._latest = None
            self._queue.put(None)
            self._thread = None

    def _run(self) -> None:
        block = self._block
        if block is None:
            import jax

            block = jax.block_until_ready
        q = self._queue
        while True:
            step = q.get()
            if step is None:
                return
            if isinstance(step, threading.Event):  # flush() marker
                step.set()
                continue
            try:
                block(step.outputs)
                ready_at: Optional[float] = self._clock()
            except Exception:  # donated by a later step, or a broken clock
                ready_at = None
            step.outputs = None  # never keep device memory alive
            with step.lock:
                step.ready_at = ready_at
                step.failed = ready_at is None
                waiting, step.waiting = step.waiting, []
            if ready_at is None:
                self.unobserved += len(waiting)
                continue
            for t0, t1, sink in waiting:
                try:
                    _stall(t0, t1, ready_at, sink)
                except Exception:
                    _probe.log_once("stall-record", "goodput: recording an input stall failed")


def _after_fork_in_child() -> None:
    for watch in list(_LIVE):
        watch._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def record_stall(recorder: Any, start: float, end: float) -> None:
    """Records one input stall with explicit times."""
    recorder.record_input_stall_start_time(start)
    recorder.record_input_stall_end_time(end)



def begin_observed_load() -> Optional[Tuple[Any, LoadToken]]:
    """A load recorded by another adapter starts now: a handle when the active
    JAX adapter can observe the device, else None (never raises)."""
    adapter = _active.current
    if adapter is None or not adapter.active or getattr(adapter, "stalls", None) is None:
        return None
    t0 = adapter.now()
    token = None if t0 is None else adapter.load_started(t0)
    return None if token is None else (adapter, token)


def end_observed_load(handle: Optional[Tuple[Any, LoadToken]], sink: Sink) -> None:
    """The load of ``handle`` ended now: ``sink(start, end)`` records its input
    stall, if any (now or from the watcher thread; never raises here)."""
    if handle is None:
        return
    adapter, token = handle
    try:
        t1 = adapter.now()
        if t1 is not None:
            adapter.stalls.end(token, t1, sink)
    except Exception:
        _probe.log_once("stall-other", "goodput: recording an input stall failed")
