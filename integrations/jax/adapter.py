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

from typing import Any, Callable, Dict, Optional

from goodput_integrations.base.adapter import AdapterBase
from goodput_integrations.base.spans import record_load
from goodput_integrations.jax import _probe
from goodput_integrations.jax._active import ACTIVE
from goodput_integrations.jax.accel import AcceleratorInitTimer
from goodput_integrations.jax.data import instrument_iterator, timed_load_batch
from goodput_integrations.jax.gate import ProcessGate
from goodput_integrations.jax.listeners import ListenerSet, compile_listeners
from goodput_integrations.jax.metadata import record_flops, run_metadata
from goodput_integrations.jax.signals import DisruptionHooks
from goodput_integrations.jax.stalls import StallWatch
from goodput_integrations.jax.steps import block_until_ready, track_steps

__all__ = ["JaxAdapter"]


class JaxAdapter(AdapterBase):
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

    slot = ACTIVE
    _log_once = staticmethod(_probe.log_once)

    def __init__(self, recorder: Any, *, per_host: bool = False,
                 sync_every: Optional[int] = None, clock: Optional[Callable[[], float]] = None,
                 accelerator_init: bool = True, compile_spans: bool = True,
                 compile_on_any_thread: bool = False, cache_metrics: bool = True,
                 sigterm: bool = True, excepthook: bool = True, metadata: bool = True,
                 flush_timeout_s: float = 2.0, input_stalls: bool = True):
        _probe.require_jax()
        super().__init__(recorder, per_host=per_host, clock=clock)
        if sync_every is not None and (not isinstance(sync_every, int) or sync_every < 1):
            raise ValueError(f"sync_every must be a positive int or None, got {sync_every!r}")
        self.sync_every = sync_every
        self._opts = dict(accelerator_init=accelerator_init, compile_spans=compile_spans,
                          compile_on_any_thread=compile_on_any_thread,
                          cache_metrics=cache_metrics, metadata=metadata)
        self._listeners = ListenerSet()
        self._accel = AcceleratorInitTimer(self)
        self._hooks = DisruptionHooks(self, sigterm=sigterm, excepthook=excepthook,
                                      flush_timeout_s=flush_timeout_s)
        self.stalls = StallWatch(self.now) if input_stalls else None
        self.gate = ProcessGate(recorder, per_host=per_host, on_decided=self._on_decided)

    # ------------------------------------------------------------- lifecycle
    def _install(self) -> None:
        opts = self._opts
        if opts["compile_spans"] or opts["cache_metrics"]:
            compile_listeners(self, self._listeners, any_thread=opts["compile_on_any_thread"],
                              cache_metrics=opts["cache_metrics"])
        if opts["accelerator_init"]:
            self._accel.install()
        self._hooks.install()

    def _instrumented(self) -> None:
        if _probe.backends_initialized():
            self.on_backends_ready()  # the gate can decide now: metadata goes out

    def _uninstall(self, linger: bool) -> None:
        self._listeners.remove_all()
        self._accel.uninstall()
        self._hooks.uninstall()

    @property
    def accelerator_init_missed(self) -> bool:
        """True when backends were initialised before instrument(): no init span."""
        return self._accel.too_late

    # ------------------------------------------------------------ recording
    # Hot paths of the data and step wrappers: kept flat (right after a
    # device step the interpreter runs with cold caches, and every frame and
    # attribute load shows in the step time).
    def loaded(self, t0: float, token: Any = None) -> None:
        """Records a data-loading span from ``t0`` to now, and the input stall
        inside it when ``token`` observed the device (never raises)."""
        try:
            if token is not None:
                t1 = self.clock()
                self.gate.submit(record_load, self.recorder, t0, t1)
                self.stalls.end(token, t1, self.record_stall)
            elif self.gate.decision and self._recorder_stamps:
                rec = self.recorder
                rec.record_data_loading_start_time(t0)
                rec.record_data_loading_end_time()
            else:
                self.gate.submit(record_load, self.recorder, t0, self.clock())
        except Exception:
            _probe.log_once("data-record", "goodput: recording a data-loading span failed")

    def step_started(self, step: int) -> None:
        """Records the start (dispatch) of ``step`` now (never raises)."""
        try:
            self._record_step_time(self.recorder.record_step_start_time, step)
        except Exception:
            _probe.log_once("step-start", "goodput: recording a step start failed")

    def step_ended(self, step: int) -> None:
        """Records the end of ``step`` now (never raises)."""
        try:
            self._record_step_time(self.recorder.record_step_end_time, step)
        except Exception:
            _probe.log_once("step-end", "goodput: recording a step end failed")

    def step_returned(self, step: int, count: int, result: Any,
                      sync_every: Optional[int]) -> None:
        """The step function of ``step`` (the ``count``-th tracked call)
        returned ``result``: the stall watch observes it; every
        ``sync_every`` (else the adapter's) calls, wait for it and record
        the step end (raises what waiting raises: the step's own error)."""
        stalls = self.stalls
        if stalls is not None:
            stalls.dispatched(result)  # when it is ready, the device is idle
        every = sync_every or self.sync_every
        if every and count % every == 0:
            block_until_ready(result)
            self.step_ended(step)

    def on_backends_ready(self) -> None:
        """Called once the backends exist: decide who writes (metadata follows)."""
        decided = self.gate.decide()
        if decided is not None:
            self._on_decided(decided)

    def _metadata_ready(self) -> bool:
        # decided from jax.distributed: devices are not up yet
        return _probe.backends_initialized() is not False

    def _run_metadata(self) -> Dict[str, Any]:
        return run_metadata()

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

    def record_flops(self, fn: Any, *args: Any, **kwargs: Any) -> Optional[float]:
        """Records FLOPs per step of ``fn(*args)`` as run metadata (see metadata.py)."""
        return record_flops(self, fn, *args, **kwargs)
