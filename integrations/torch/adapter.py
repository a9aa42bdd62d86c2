"""The PyTorch adapter: one object that switches every PyTorch hook on and off.

Example::

    from goodput_integrations import torch as gtorch

    with rec.job(), gtorch.instrumented(rec):
        dist.init_process_group("nccl")                 # accelerator init
        loader = gtorch.instrument_loader(DataLoader(...))
        train_step = gtorch.train_step(step_fn, first_step=start)
        for x, y in loader:
            train_step(x, y)
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Dict, Optional, Tuple

from goodput_core.events import Kind
from goodput_core.record.native import adapters_changed, native_loop
from goodput_integrations.base.adapter import AdapterBase
from goodput_integrations.base.spans import record_load, record_stall
from goodput_integrations.jax.gate import ProcessGate
from goodput_integrations.torch import _probe
from goodput_integrations.torch._active import ACTIVE
from goodput_integrations.torch.accel import AcceleratorInitTimer
from goodput_integrations.torch.checkpoints import DCP_LOGGER_MODULE, DcpListener
from goodput_integrations.torch.compile import CompileSpans
from goodput_integrations.torch.data import instrument_loader
from goodput_integrations.torch.metadata import run_metadata
from goodput_integrations.torch.signals import LingeringHooks
from goodput_integrations.torch.steps import SyncEvery, check_sync_every, track_steps

__all__ = ["TorchAdapter", "DEFAULT_CUDA_SYNC_EVERY", "DEFAULT_CPU_SYNC_EVERY"]

#: ``sync_every="auto"`` on CUDA: one pipeline drain per this many steps.
DEFAULT_CUDA_SYNC_EVERY = 100
#: ``sync_every="auto"`` on the CPU: a step end recorded every this many steps
#: (each return is a sync point; recording each would cost a 1 ms step ~1 %).
DEFAULT_CPU_SYNC_EVERY = 10
_DEVICES = ("auto", "cpu", "cuda")
#: :meth:`TorchAdapter.load_started`'s token for a CPU load the recorder stamps the end of
_STAMPED = object()


class _PendingStall:
    """A CPU load's stall ``(t0, t1)`` until the next step's start records it."""

    __slots__ = ("stall",)

    def __init__(self) -> None:
        self.stall: Optional[Tuple[float, float]] = None

    def take(self) -> Optional[Tuple[float, float]]:
        """The stall kept, or None; forgets it (as the compiled ``Loop.take``)."""
        stall, self.stall = self.stall, None
        return stall


class TorchAdapter(AdapterBase):
    """Instruments a PyTorch training job for one recorder.

    ``instrument()`` turns on: accelerator-init spans (process-group init and
    the first CUDA init), ``torch.compile`` compilations as program startup
    (every recompile where it happened), ``torch.distributed.checkpoint``
    save/load spans (the blocking part of ``async_save``), ``sigterm`` and
    ``exception:<Type>`` disruptions, and run metadata. Loads and steps are
    recorded by :meth:`wrap_loader` / :meth:`train_step` (or the module-level
    ``instrument_loader`` / ``train_step``), which fall through while not
    instrumented. No hook ever raises into the training loop.

    Only rank 0 writes unless ``per_host``; the rank is read from the
    process group once it exists, else from ``RANK`` (torchrun sets it
    before the process starts); events recorded while it is unknown are
    kept and replayed or dropped once it is known.

    Args:
      recorder: a :class:`goodput_core.Recorder`.
      per_host: every rank writes, with its rank as the recorder's process
        index (per-host figures, stragglers: semantics rule 13).
      sync_every: record the step end every N tracked steps (on CUDA after
        waiting for the GPU; on the CPU at the step's return); ``"auto"``:
        every 100 on CUDA, every 10 on the CPU; None: never (see steps.py).
      device: ``"auto"`` (CUDA when a CUDA context exists at the first
        tracked step), ``"cpu"`` or ``"cuda"``.
      clock: POSIX-seconds clock for the spans we time; default: the recorder's.
      accelerator_init: time ``init_process_group`` and the first CUDA init.
      compile_spans: record torch.compile compilations as program startup.
      checkpoints: record ``torch.distributed.checkpoint`` save/load calls.
      any_thread: also record compilations and DCP calls made on other
        threads than the one that called ``instrument()``.
      sigterm: record a ``sigterm`` disruption (handler chained; main thread only).
      excepthook: record ``exception:<Type>`` for an uncaught exception.
      metadata: record run metadata once this process knows whether it writes.
      input_stalls: record the idle part of each load as an input stall
        (CPU: the whole load; CUDA: observed with events, see stalls.py).
      flush_timeout_s: how long a disruption hook waits for the store.

    Raises:
      AdapterUnavailable: torch is not installed.
      ValueError: a bad option.
    """

    slot = ACTIVE
    _log_once = staticmethod(_probe.log_once)
    _LOG = "torch-"

    def __init__(self, recorder: Any, *, per_host: bool = False,
                 sync_every: SyncEvery = "auto", device: str = "auto",
                 clock: Optional[Callable[[], float]] = None, accelerator_init: bool = True,
                 compile_spans: bool = True, checkpoints: bool = True, any_thread: bool = False,
                 sigterm: bool = True, excepthook: bool = True, metadata: bool = True,
                 input_stalls: bool = True, flush_timeout_s: float = 2.0):
        _probe.require_torch()
        super().__init__(recorder, per_host=per_host, clock=clock)
        check_sync_every(sync_every)
        if device not in _DEVICES:
            raise ValueError(f"device must be one of {_DEVICES}, got {device!r}")
        self.sync_every = sync_every
        self.device = device
        self.input_stalls = bool(input_stalls)
        self._opts = dict(accelerator_init=accelerator_init, compile_spans=compile_spans,
                          checkpoints=checkpoints, metadata=metadata)
        self._last_step: Optional[int] = None  # see last_step
        self._on_cuda: Optional[bool] = None if device == "auto" else device == "cuda"
        self._every: Optional[int] = None
        self._accel = AcceleratorInitTimer(self)
        self._compile = CompileSpans(self, any_thread=any_thread)
        self._dcp = DcpListener(self, any_thread=any_thread)
        self._hooks = LingeringHooks(self, sigterm=sigterm, excepthook=excepthook,
                                      flush_timeout_s=flush_timeout_s)
        self._stamping: Optional[bool] = None  # see _stamp_loads()
        self._pending = _PendingStall()  # see _set_fast_paths()
        # self.stalls: a StallWatch on CUDA (created at the first CUDA step)
        self.gate = ProcessGate(recorder, per_host=per_host, on_decided=self._on_decided,
                                process_index=_probe.process_index)
        if device != "auto":
            self._set_device(device == "cuda")

    # ------------------------------------------------------------- lifecycle
    def _install(self) -> None:
        opts = self._opts
        if opts["compile_spans"]:
            self._compile.install()
        if opts["checkpoints"]:
            self._dcp.install()
        if opts["accelerator_init"]:
            self._accel.install()
        self._hooks.install()

    def _instrumented(self) -> None:
        self.gate.decide()  # RANK is known before any process group: metadata goes out

    def uninstrument(self, linger: bool = False) -> None:
        """Turns every hook off and removes callbacks, handlers and patches (idempotent).

        Args:
          linger: an exception is on its way out (``instrumented()`` passes
            it): the SIGTERM and exception hooks stay until it was reported,
            and flush the recorder first (see signals.py).
        """
        self._turn_off(linger)

    def uninstrument_on_error(self) -> None:
        """A crash leaves ``instrumented()``: the hooks stay until it was
        reported (signals.py), so that the disruption ``rec.job()`` records
        reaches the store under torchrun."""
        self.uninstrument(linger=True)

    def _uninstall(self, linger: bool) -> None:
        self.flush_pending()
        self._compile.uninstall()
        self._dcp.uninstall()
        self._accel.uninstall()
        if linger:
            self._hooks.linger()
        else:
            self._hooks.uninstall()

    @property
    def last_step(self) -> Optional[int]:
        """The step last started (None before the first): a checkpoint's step
        where the call does not say it."""
        loop = self.native_loop
        return self._last_step if loop is None else loop.last_step

    @last_step.setter
    def last_step(self, step: Optional[int]) -> None:
        self._last_step = step
        if self.native_loop is not None:
            self.native_loop.last_step = step

    @property
    def on_cuda(self) -> Optional[bool]:
        """Whether tracked steps run on CUDA (None until the first tracked step)."""
        return self._on_cuda

    # ------------------------------------------------------------ recording
    def _lazy_hooks(self) -> None:
        """Hooks waiting for a torch module the program had not imported at
        ``instrument()`` (TorchDynamo, DCP): attached once it is imported; the
        compile callbacks again after a ``torch._dynamo.reset()``."""
        self._compile.ensure()
        if self._dcp.pending and DCP_LOGGER_MODULE in sys.modules:
            self._dcp.ensure()

    def load_started(self, t0: float) -> Any:
        """A load begins at ``t0``: a token for :meth:`loaded` (never raises)."""
        try:
            if self.last_step is None:  # once steps run, each step start does this
                self._lazy_hooks()
            stamping = self._stamping
            if stamping is None:
                stamping = self._stamp_loads()
            if stamping:  # CPU, this process writes: see loaded()
                return _STAMPED
        except Exception:
            _probe.log_once("torch-lazy-hooks", "goodput: attaching torch hooks failed")
        return super().load_started(t0)  # on CUDA: the stall watch's token

    def loaded(self, t0: float, token: Any = None) -> None:
        """Records a load from ``t0`` to now: on the CPU as an input stall, the
        whole of it (the compute waited for it; recording it as a load too
        would add two events a step and change no figure); on CUDA as a
        data-loading span and the stall the watch observed (never raises)."""
        try:
            if token is _STAMPED:  # nothing is recorded before the load returned a batch
                self.recorder._record_since(Kind.INPUT_STALL_START, Kind.INPUT_STALL_END, t0)
                return
            t1 = self.clock()
            if not self.input_stalls:
                self.gate.submit(record_load, self.recorder, t0, t1)
            elif self._on_cuda:
                self.gate.submit(record_load, self.recorder, t0, t1)
                if token is not None:
                    self.stalls.end(token, t1, self.record_stall)
            else:  # CPU (or no step yet: outside steps a load blocks anyway)
                self.gate.submit(record_stall, self.recorder, t0, t1)
        except Exception:
            _probe.log_once("torch-data-record", "goodput: recording a data-loading span failed")

    def _stamp_loads(self) -> bool:
        """Whether a load is recorded as it happens with the recorder's own
        stamps: on the CPU (a load is a stall), once this process knows it
        writes, with the recorder's clock, which has the fast span call.
        Kept in ``_stamping`` once the device and the decision are known
        (neither changes after)."""
        stamping = (self.input_stalls and self._on_cuda is False and self._recorder_stamps
                    and self.gate.decision is True
                    and hasattr(self.recorder, "_record_since"))
        if self._on_cuda is not None and self.gate.decision is not None:
            self._stamping = stamping
        return stamping

    def step_started(self, step: int) -> None:
        """Records the start of ``step`` now (never raises)."""
        try:
            self.last_step = step
            if self._on_cuda is None:
                self._decide_device()
            self._lazy_hooks()
            if self._on_cuda is False and self.gate.decision is not None \
                    and self.fast_steps is None:
                self._set_fast_paths()
            # flat, as the JAX adapter's hot paths: this runs in the loop's cold caches
            if self.gate.decision and self._recorder_stamps:
                self.recorder.record_step_start_time(step)
            else:
                self.gate.submit(self.recorder.record_step_start_time, step, self.clock())
        except Exception:
            _probe.log_once("torch-step-start", "goodput: recording a step start failed")

    def _set_fast_paths(self) -> None:
        """On the CPU, once this process writes with the recorder's clock: the
        step wrapper's and the loader's direct calls (``fast_steps``,
        ``fast_load``), the hooks' effect in fewer frames and journal writes,
        run in the cold caches a step leaves (quality P15). A load's stall is
        written with the next step's start, in one journal write; a load that
        no step follows (the next load, ``uninstrument()``, a disruption) is
        written then (:meth:`flush_pending`). Neither the device nor the
        decision changes after; ``uninstrument()`` stops every wrapper first."""
        rec = self.recorder
        if not (self.gate.decision and self._recorder_stamps) or self._set_native_path():
            return
        compile_spans, dcp, lazy = self._compile, self._dcp, self._lazy_hooks
        start_cb, modules, dynamo = compile_spans._start_cb, sys.modules, "torch._dynamo"
        record_start, stall_then_start = rec.record_step_start_time, None
        pending = self._pending
        if self.input_stalls and hasattr(rec, "_record_stall_then_step"):
            stall_then_start = rec._record_stall_then_step
        adapter = self

        def start(step: int) -> None:
            adapter._last_step = step
            # _lazy_hooks()'s tests, inline: our compile callback is still the
            # handler's last (a reset clears it), or TorchDynamo is not imported;
            # DCP is attached or not imported
            registered = compile_spans._registered_in
            if (registered[-1] is not start_cb if registered else (
                    compile_spans._installed and dynamo in modules)) or (
                    dcp.pending and DCP_LOGGER_MODULE in modules):
                lazy()
            stall = pending.stall
            if stall is None:
                record_start(step)
            else:
                pending.stall = None
                stall_then_start(stall[0], stall[1], step)

        record_end, adapter_every = rec.record_step_end_time, self._every

        def end(step: int, count: int, sync_every: SyncEvery) -> None:
            every = adapter_every if sync_every == "auto" else sync_every
            if every and not count % every:
                record_end(step)

        self.fast_steps = (start, end)
        if stall_then_start is None:
            return
        clock = self.clock

        def loaded(t0: float) -> None:
            if pending.stall is not None:  # the last load had no step after it
                adapter.flush_pending()
            pending.stall = (t0, clock())

        self.fast_load = (clock, loaded)

    def _set_native_path(self) -> bool:
        """The fast paths compiled (goodput_core.record.native), where built and
        the recorder's journal calls apply, with input stalls on: the wrappers
        then record through ``native_loop`` with no Python frame. Whether set."""
        if not (self.input_stalls and hasattr(self.recorder, "_record_stall_then_step")):
            return False
        compile_spans = self._compile
        loop = native_loop(self.recorder, every=self._every or 0, lazy=self._lazy_hooks,
                           compile_spans=compile_spans, start_cb=compile_spans._start_cb,
                           record_stall=functools.partial(record_stall, self.recorder),
                           on_error=self._native_failed)
        if loop is None:
            return False
        loop.last_step = self._last_step
        self._pending = self.native_loop = loop
        self.fast_steps, self.fast_load = (loop.start, loop.end), (self.clock, loop.loaded)
        adapters_changed()
        return True

    @staticmethod
    def _native_failed(what: str, message: str, exc: BaseException) -> None:
        """The compiled loop calls' failed recording, logged once."""
        _probe.log_once("torch-" + what, message, exc_info=exc)

    def flush_pending(self) -> None:
        """Records a load's stall still waiting for its step (never raises)."""
        stall = self._pending.take()
        if stall is not None:
            try:
                record_stall(self.recorder, stall[0], stall[1])
            except Exception:
                _probe.log_once("torch-data-record", "goodput: recording a data-loading span "
                                "failed")

    def step_returned(self, step: int, count: int, result: Any, sync_every: SyncEvery) -> None:
        """The step function of ``step`` (the ``count``-th tracked call) returned:
        on the CPU its end now; on CUDA an event for the stall watch, and at a
        sync point a wait for the GPU and the end (never raises)."""
        try:
            every = self._every if sync_every == "auto" else sync_every
            if not self._on_cuda:
                if not every or count % every:
                    return
                if self.gate.decision and self._recorder_stamps:
                    self.recorder.record_step_end_time(step)
                else:
                    self.gate.submit(self.recorder.record_step_end_time, step, self.clock())
                return
            if self.stalls is not None:
                self.stalls.dispatched(result)
            if every and count % every == 0:
                import torch

                torch.cuda.synchronize()
                self.gate.submit(self.recorder.record_step_end_time, step, self.clock())
        except Exception:
            _probe.log_once("torch-step-end", "goodput: recording a step end failed")

    def step_ended(self, step: int) -> None:
        """Records the end of ``step`` now (never raises)."""
        try:
            self.gate.submit(self.recorder.record_step_end_time, step, self.clock())
        except Exception:
            _probe.log_once("torch-step-end", "goodput: recording a step end failed")

    def _decide_device(self) -> None:
        torch = _probe.imported_torch()
        on_cuda = False
        if torch is not None:
            try:
                on_cuda = bool(torch.cuda.is_available() and torch.cuda.is_initialized())
            except Exception:
                on_cuda = False
        self._set_device(on_cuda)

    def _set_device(self, on_cuda: bool) -> None:
        self._on_cuda = on_cuda
        every = self.sync_every
        if every == "auto":
            every = DEFAULT_CUDA_SYNC_EVERY if on_cuda else DEFAULT_CPU_SYNC_EVERY
        self._every = every
        if on_cuda:
            if self.input_stalls and self.stalls is None:
                # lazy: the CUDA stall watch (and the JAX adapter's StallWatch): on CUDA only
                from goodput_integrations.torch.stalls import cuda_stall_watch

                self.stalls = cuda_stall_watch(self.now)

    def on_process_group(self) -> None:
        """Called after ``init_process_group``: the rank is known (metadata follows)."""
        decided = self.gate.decide()
        if decided:
            self._metadata_done = False  # the world size is known now: record it again
            self._on_decided(True)

    def _run_metadata(self) -> Dict[str, Any]:
        return run_metadata()

    # ------------------------------------------------------ user-facing API
    def wrap_loader(self, loader: Any) -> Any:
        """Wraps a DataLoader: each ``next()`` is a data-loading span (see data.py)."""
        return instrument_loader(loader, adapter=self)

    def train_step(self, fn: Optional[Callable] = None, *, first_step: int = 0,
                   sync_every: SyncEvery = "auto") -> Any:
        """Wraps the step function: each call is the next step (see steps.py)."""
        return track_steps(fn, first_step=first_step, sync_every=sync_every, adapter=self)
