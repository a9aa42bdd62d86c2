"""The JAX adapter: one object that switches every JAX hook on and off.

Example::

    from goodput_integrations import jax as gjax

    gjax.instrument(recorder)                  # or: with gjax.instrumented(recorder):
    batches = gjax.instrument_iterator(dataset)

    @gjax.train_step
    @jax.jit
    def step(state, batch): ...
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

from goodput_integrations.jax import _active, _probe
from goodput_integrations.jax.accel import AcceleratorInitTimer
from goodput_integrations.jax.data import instrument_iterator, timed_load_batch
from goodput_integrations.jax.gate import ProcessGate
from goodput_integrations.jax.listeners import ListenerSet, compile_listeners
from goodput_integrations.jax.metadata import record_flops, run_metadata
from goodput_integrations.jax.signals import DisruptionHooks
from goodput_integrations.jax.stalls import StallWatch, record_stall
from goodput_integrations.jax.steps import gated_step, track_steps

__all__ = ["JaxAdapter"]


def _record_load(recorder: Any, t0: float, t1: float) -> None:
    recorder.record_data_loading_start_time(t0)
    recorder.record_data_loading_end_time(t1)


def _recorder_clock(recorder: Any) -> Callable[[], float]:
    clock = getattr(recorder, "clock", None)
    if not callable(clock):
        clock = getattr(recorder, "_clock", None)
    return clock if callable(clock) else time.time


class JaxAdapter:
    """Instruments a JAX training job for one recorder.

    ``instrument()`` turns on: accelerator-init timing, compile spans from
    ``jax.monitoring`` (program startup; a compile after training started is
    re-compilation, placed where it happened), disruption events on SIGTERM
    and on an uncaught exception, and run metadata. Data loading and steps
    are recorded by :meth:`wrap_iterator` / :meth:`train_step` (or the
    module-level equivalents), which fall through while not instrumented.
    No hook ever raises into the training loop.

    Only process 0 writes unless ``per_host``; the process index is read
    lazily, once asking cannot initialise a backend, so it is safe to build
    and instrument before ``jax.distributed.initialize()``.

    Args:
      recorder: a :class:`goodput_core.Recorder` (or any object with the
        same ``record_*`` methods).
      per_host: every process writes, with its process index set on the
        recorder (per-host step times); default: process 0 only.
      sync_every: tracked steps wait for their result every N steps and then
        record a step end (None: never wait, no step ends).
      clock: POSIX-seconds clock for spans we time ourselves; default: the
        recorder's clock (also read by the input-stall watcher thread).
      accelerator_init: time the first backend init and ``jax.distributed.initialize``.
      compile_spans: record ``jax.monitoring`` compile phases as program startup.
      compile_on_any_thread: also record compiles emitted on other threads
        than the one calling ``instrument()`` (they do not block the loop).
      cache_metrics: record persistent-compilation-cache durations as metrics.
      sigterm: record a ``sigterm`` disruption (handler chained; main thread only).
      excepthook: record ``exception:<Type>`` for an uncaught exception.
      metadata: record run metadata once the backends exist.
      flush_timeout_s: how long a disruption hook waits for the store.
      input_stalls: record the part of each load during which the device
        was idle as an input stall (a watcher thread observes when each
        tracked step's outputs become ready; see stalls.py).

    Raises:
      AdapterUnavailable: jax is not installed.
      ValueError: a bad option.
    """

    def __init__(self, recorder: Any, *, per_host: bool = False,
                 sync_every: Optional[int] = None, clock: Optional[Callable[[], float]] = None,
                 accelerator_init: bool = True, compile_spans: bool = True,
                 compile_on_any_thread: bool = False, cache_metrics: bool = True,
                 sigterm: bool = True, excepthook: bool = True, metadata: bool = True,
                 flush_timeout_s: float = 2.0, input_stalls: bool = True):
        _probe.require_jax()
        if recorder is None:
            raise ValueError("recorder is required (use NULL_RECORDER to record nothing)")
        if sync_every is not None and (not isinstance(sync_every, int) or sync_every < 1):
            raise ValueError(f"sync_every must be a positive int or None, got {sync_every!r}")
        self.recorder = recorder
        self.per_host = bool(per_host)
        self.sync_every = sync_every
        self.clock = clock or _recorder_clock(recorder)
        # With the recorder's own clock, an event stamped "now" can leave the
        # time to the recorder (one clock read and one conversion fewer).
        self._recorder_stamps = clock is None
        self._opts = dict(accelerator_init=accelerator_init, compile_spans=compile_spans,
                          compile_on_any_thread=compile_on_any_thread,
                          cache_metrics=cache_metrics, metadata=metadata)
        self.active = False
        self.train_thread: Optional[int] = None
        self._lock = threading.Lock()
        self._listeners = ListenerSet()
        self._accel = AcceleratorInitTimer(self)
        self._hooks = DisruptionHooks(self, sigterm=sigterm, excepthook=excepthook,
                                      flush_timeout_s=flush_timeout_s)
        self._metadata_done = False
        self.stalls = StallWatch(self.now) if input_stalls else None
        self.gate = ProcessGate(recorder, per_host=per_host, on_decided=self._on_decided)

    # ------------------------------------------------------------- lifecycle
    def instrument(self) -> "JaxAdapter":
        """Turns every hook on (idempotent: a second call changes nothing).

        Returns:
          self, so that ``adapter = JaxAdapter(rec).instrument()`` works.
        """
        with self._lock:
            if self.active:
                return self
            self.train_thread = threading.get_ident()
            self.active = True
            opts = self._opts
            try:
                if opts["compile_spans"] or opts["cache_metrics"]:
                    compile_listeners(self, self._listeners,
                                      any_thread=opts["compile_on_any_thread"],
                                      cache_metrics=opts["cache_metrics"])
                if opts["accelerator_init"]:
                    self._accel.install()
                self._hooks.install()
            except Exception:
                self._teardown()
                raise
            _active.current = self
        if _probe.backends_initialized():
            self.on_backends_ready()  # the gate can decide now: metadata goes out
        return self

    def uninstrument(self) -> None:
        """Turns every hook off and removes listeners and patches (idempotent)."""
        with self._lock:
            if not self.active:
                return
            self._teardown()

    def _teardown(self) -> None:
        self.active = False
        self._listeners.remove_all()
        self._accel.uninstall()
        self._hooks.uninstall()
        if self.stalls is not None:
            self.stalls.stop()
        if _active.current is self:
            _active.current = None

    def __enter__(self) -> "JaxAdapter":
        return self.instrument()

    def __exit__(self, *exc: Any) -> None:
        self.uninstrument()

    @property
    def accelerator_init_missed(self) -> bool:
        """True when backends were initialised before instrument(): no init span."""
        return self._accel.too_late

    # ------------------------------------------------------------ recording
    def emit(self, fn: Callable[..., None], *args: Any) -> None:
        """Runs a record call on the writing process (buffered until known).

        Hooks call this; it raises what ``fn`` raises (hooks guard it).
        """
        self.gate.submit(fn, *args)

    # Hot paths of the data and step wrappers: flat on purpose (right after
    # a device step the interpreter runs with cold caches, and every frame
    # and attribute load shows in the step time).
    def now(self) -> Optional[float]:
        """The adapter's clock, or None if it fails (never raises)."""
        try:
            return self.clock()
        except Exception:
            _probe.log_once("clock", "goodput: the clock failed")
            return None

    def load_started(self, t0: float) -> Any:
        """A load begins at ``t0``: a token for :meth:`loaded` (never raises)."""
        stalls = self.stalls
        if stalls is None:
            return None
        try:
            return stalls.begin(t0)
        except Exception:
            _probe.log_once("stall-begin", "goodput: observing the device failed")
            return None

    def loaded(self, t0: float, token: Any = None) -> None:
        """Records a data-loading span from ``t0`` to now, and the input stall
        inside it when ``token`` observed the device (never raises)."""
        try:
            if token is not None:
                t1 = self.clock()
                self.gate.submit(_record_load, self.recorder, t0, t1)
                self.stalls.end(token, t1, self.record_stall)
            elif self.gate.decision and self._recorder_stamps:
                rec = self.recorder
                rec.record_data_loading_start_time(t0)
                rec.record_data_loading_end_time()
            else:
                self.gate.submit(_record_load, self.recorder, t0, self.clock())
        except Exception:
            _probe.log_once("data-record", "goodput: recording a data-loading span failed")

    def record_stall(self, start: float, end: float) -> None:
        """Records an input stall ``[start, end)`` (raises what the recorder raises)."""
        self.gate.submit(record_stall, self.recorder, start, end)

    def step_started(self, step: int) -> None:
        """Records the start (dispatch) of ``step`` now (never raises)."""
        try:
            if self.gate.decision and self._recorder_stamps:
                self.recorder.record_step_start_time(step)
            else:
                self.gate.submit(self.recorder.record_step_start_time, step, self.clock())
        except Exception:
            _probe.log_once("step-start", "goodput: recording a step start failed")

    def step_ended(self, step: int) -> None:
        """Records the end of ``step`` now (never raises)."""
        try:
            if self.gate.decision and self._recorder_stamps:
                self.recorder.record_step_end_time(step)
            else:
                self.gate.submit(self.recorder.record_step_end_time, step, self.clock())
        except Exception:
            _probe.log_once("step-end", "goodput: recording a step end failed")

    def on_backends_ready(self) -> None:
        """Called once the backends exist: decide who writes (metadata follows)."""
        decided = self.gate.decide()
        if decided is not None:
            self._on_decided(decided)

    def _on_decided(self, writes: bool) -> None:
        if not writes or not self._opts["metadata"]:
            return
        if _probe.backends_initialized() is False:
            return  # decided from jax.distributed; devices are not up yet
        with self._lock:
            if self._metadata_done:
                return
            self._metadata_done = True
        try:
            fields = run_metadata()
            self.recorder.record_metadata(**fields)
        except Exception:
            _probe.log_once("metadata", "goodput: recording run metadata failed")

    # ------------------------------------------------------ user-facing API
    def wrap_iterator(self, it: Any) -> Any:
        """Wraps a data iterator: each ``next()`` is a data-loading span (see data.py)."""
        return instrument_iterator(it, adapter=self)

    def load_batch(self, fn: Callable) -> Callable:
        """Decorator: each call of ``fn`` is a data-loading span."""
        return timed_load_batch(fn, adapter=self)

    def train_step(self, fn: Optional[Callable] = None, *, first_step: int = 0,
                   sync_every: Optional[int] = None) -> Any:
        """Decorator: each call of the step function is the next step (see steps.py)."""
        return track_steps(fn, first_step=first_step, sync_every=sync_every, adapter=self)

    def step(self, step: int) -> Any:
        """Context manager: ``recorder.step(k)`` through this adapter's process gate."""
        return gated_step(self, step)

    def record_flops(self, fn: Any, *args: Any, **kwargs: Any) -> Optional[float]:
        """Records FLOPs per step of ``fn(*args)`` as run metadata (see metadata.py)."""
        return record_flops(self, fn, *args, **kwargs)
