"""Input stalls: the part of a data load during which the device sat idle.

With asynchronous dispatch a jitted step returns as soon as its work is
enqueued, so the step span (dispatch to dispatch) contains the blocking
``next()`` that follows it, and by position alone that load looks
overlapped. It is overlapped only while the device still runs the step
dispatched before it (steps run in order: once the latest one is done, the
device has no work of this loop left). For a load ``[t0, t1)`` on the thread
that dispatched the latest tracked step, with ``f`` the time that step's
outputs became ready, the stall is ``[max(t0, f), t1)`` when ``f < t1``:

* the step decorator hands each step's outputs to :meth:`StallWatch.dispatched`,
  which keeps weak references to their arrays until the next step (the watch
  never keeps a model state alive that the loop dropped; outputs all dropped
  = nothing observed);
* at the start and the end of the load, the training thread asks whether all
  of those outputs are ready (``jax.Array.is_ready``; it stops at the first
  one that is not). Ready at the start: the whole load is a stall. Not ready
  at the end: no stall, the load was overlapped;
* in between (the device finished during the load, the usual case of a
  starved loop) ``f`` is measured: a watcher thread blocks on the outputs
  (``block_until_ready`` releases the GIL), stamps ``f`` and drops its
  reference to them. It is handed a step at the start of each load that
  finds the device busy, while the watch is *measuring*; the watch stops
  measuring after :data:`QUIET_LOADS` loads in a row ended with the device
  still busy (a device-bound loop then pays no thread hand-over), and starts
  again at the next load that ended with the device idle. When the load ends
  before the watcher knows ``f``, the watcher records the stall later, with
  the load's own times.

The stall is recorded as an ``input_stall`` start/end pair inside the load's
``data_loading`` pair (readers that do not know the kind see ordinary data
loading). A load before any tracked step is not observed: it lies outside
step spans, where it blocks anyway.

Error bound (a stall is only ever under-reported): ``f`` is stamped when the
watcher runs again after the outputs became ready, which can be late by the
time it waits for the GIL: microseconds when the loader waits outside Python
(I/O, sleeps, tf.data, Grain threads), up to ``sys.getswitchinterval()``
(5 ms by default) per load when the loader is pure Python holding the GIL.
A load during which the device finished while the watch was not measuring
records no stall (one load each time a device-bound loop turns starved;
counted in :attr:`StallWatch.unmeasured`), and so do loads whose outputs
could not be observed (deleted by donation, a failing clock: ``unobserved``).

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

from goodput_integrations.base.spans import record_stall
from goodput_integrations.jax import _probe
from goodput_integrations.jax._active import ACTIVE

__all__ = ["QUIET_LOADS", "StallWatch", "LoadToken", "begin_observed_load",
           "end_observed_load", "record_stall"]

Sink = Callable[[float, float], None]
#: Loads in a row that end with the device still busy before the watch stops
#: handing steps to its watcher thread.
QUIET_LOADS = 8
_LIVE: "weakref.WeakSet[StallWatch]" = weakref.WeakSet()
_tree_leaves: Optional[Callable[[Any], List[Any]]] = None
_Array: Any = None


class _Step:
    """One dispatched step: weak references to its output arrays, and once
    measured the time they were ready.

    Weak, so that the watch never keeps a step's outputs (a whole model
    state) alive after the loop dropped them: an extra copy of the state in
    accelerator memory, and on CPU a cold allocation for every new one.
    """

    __slots__ = ("refs", "thread", "posted", "ready_at", "failed", "waiting", "lock")

    def __init__(self, outputs: Any, thread: int):
        global _tree_leaves, _Array
        if _tree_leaves is None:
            import jax

            _tree_leaves, _Array = jax.tree_util.tree_leaves, jax.Array
        array, ref = _Array, weakref.ref
        self.refs = [ref(x) for x in _tree_leaves(outputs) if isinstance(x, array)]
        self.thread = thread
        self.posted = False
        self.ready_at: Optional[float] = None
        self.failed = False
        self.waiting: List[Tuple[float, float, Sink]] = []
        self.lock = threading.Lock()

    def leaves(self) -> List[Any]:
        """The output arrays the loop still holds."""
        return [x for x in (r() for r in self.refs) if x is not None]

    def wait(self) -> bool:
        """Blocks until the outputs the loop still holds are ready (the GIL is
        released meanwhile); False when it dropped them all (nothing known)."""
        leaves = self.leaves()  # held only while waiting
        for leaf in leaves:
            leaf.block_until_ready()
        return bool(leaves)

    def done(self) -> Optional[bool]:
        """True when every output array still alive is ready, None when the
        loop dropped them all (nothing left to observe); raises when one was
        deleted, e.g. donated. Checked last to first: a busy device usually
        shows at the first look."""
        alive = False
        for r in reversed(self.refs):
            leaf = r()
            if leaf is None:
                continue
            if not leaf.is_ready():
                return False
            alive = True
        return True if alive else None


#: (step, load start, ready at the load start)
LoadToken = Tuple[_Step, float, bool]


def _stall(t0: float, t1: float, ready_at: float, sink: Sink) -> None:
    if ready_at < t1:
        sink(max(t0, ready_at), t1)


class StallWatch:
    """Finds the idle part of each load (see the module docstring).

    Args:
      clock: the POSIX-seconds clock that stamps readiness (the adapter's);
        None from it means "unknown".
      step_type: builds the record of one dispatched step from its outputs
        and the dispatching thread (default: JAX arrays, :class:`_Step`).
        Another framework passes its own (the PyTorch adapter: a CUDA event
        recorded after the step): it has the attributes of :class:`_Step`
        and its ``done()`` and ``wait()``.
    """

    def __init__(self, clock: Callable[[], Optional[float]],
                 step_type: Optional[Callable[..., Any]] = None):
        self._clock = clock
        self._step_type = step_type or _Step
        self._latest: Optional[_Step] = None
        self._queue: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self.measuring = True   # hand steps to the watcher thread (see QUIET_LOADS)
        self._quiet = 0
        self.unobserved = 0
        self.unmeasured = 0
        _LIVE.add(self)

    # ------------------------------------------------- training-thread hooks
    def dispatched(self, outputs: Any) -> None:
        """A tracked step was dispatched; ``outputs`` are its results."""
        self._latest = self._step_type(outputs, threading.get_ident())

    def begin(self, t0: float) -> Optional[LoadToken]:
        """A load starts at ``t0`` on this thread; None when nothing is observed.

        Raises what ``is_ready`` raises (the adapter guards it)."""
        step = self._latest
        if step is None or step.thread != threading.get_ident():
            return None
        ready = step.done()
        if ready is None:  # outputs dropped: unknown
            return None
        if not ready and self.measuring and not step.posted:
            self._post(step)
        return step, t0, ready

    def end(self, token: Optional[LoadToken], t1: float, sink: Sink) -> None:
        """The load of ``token`` ended at ``t1``: ``sink(start, end)`` gets its
        stall now, or later from the watcher thread."""
        if token is None:
            return
        step, t0, ready_at_start = token
        if ready_at_start:
            self._quiet = 0
            sink(t0, t1)
            return
        ready_at = step.ready_at
        if ready_at is not None:
            self._quiet = 0
            _stall(t0, t1, ready_at, sink)
            return
        done = step.done()
        if done is None:  # outputs dropped during the load
            self.unobserved += 1
            return
        if not done:  # still busy: the load was overlapped
            self._quiet += 1
            if self._quiet >= QUIET_LOADS:
                self.measuring = False
            return
        self._quiet = 0
        if not step.posted:  # finished during a load we did not measure
            self.unmeasured += 1
            self.measuring = True
            return
        with step.lock:  # the watcher has not stamped it yet: it records the stall
            if step.ready_at is None:
                if step.failed:
                    self.unobserved += 1
                else:
                    step.waiting.append((t0, t1, sink))
                return
        _stall(t0, t1, step.ready_at, sink)

    # ----------------------------------------------------------- lifecycle
    def _post(self, step: _Step) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    thread = threading.Thread(target=self._run, args=(self._queue,),
                                              name="goodput-stall-watch", daemon=True)
                    try:
                        thread.start()
                    except RuntimeError:  # interpreter shutting down
                        return
                    self._thread = thread
        step.posted = True
        self._queue.put(step)

    def _forget(self) -> None:
        """In a forked child: the watcher thread did not survive the fork."""
        self._latest = None
        self._thread = None
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Waits until the steps handed over so far were measured and their
        stalls recorded (True at once when no watcher runs)."""
        if self._thread is None:
            return True
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def stop(self) -> None:
        """Forgets the last step; the watcher thread ends once it measured the
        steps handed over so far (idempotent; does not wait)."""
        with self._lock:
            self._latest = None
            if self._thread is not None:
                self._queue.put(None)
                self._thread = None

    def _run(self, q: "queue.SimpleQueue[Any]") -> None:
        while True:
            step = q.get()
            if step is None:
                return
            if isinstance(step, threading.Event):  # flush() marker
                step.set()
                continue
            try:
                ready_at = self._clock() if step.wait() else None  # none left: unknown
            except Exception:  # deleted (donated) meanwhile
                ready_at = None
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


def begin_observed_load() -> Optional[Tuple[Any, LoadToken]]:
    """A load recorded by another adapter starts now: a handle when the active
    JAX adapter can observe the device, else None (never raises)."""
    adapter = ACTIVE.current
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
