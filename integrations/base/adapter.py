"""The adapter object: every hook of one framework on and off together, for one recorder.

:class:`AdapterBase` is what the JAX and PyTorch adapters share: the
lifecycle (``instrument()`` installs the framework's hooks and puts the
adapter in its :class:`~goodput_integrations.base.slot.AdapterSlot`,
``uninstrument()`` removes both), the clock, the process gate every record
call goes through (only the writing process records; events before that is
known are buffered), run metadata once this process knows it writes, and
``step(k)``. What a load, a step or a framework hook means stays in each
adapter.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from goodput_core.record.native import adapters_changed
from goodput_integrations.base.slot import AdapterSlot
from goodput_integrations.base.spans import record_stall

__all__ = ["AdapterBase", "recorder_clock"]


def recorder_clock(recorder: Any) -> Callable[[], float]:
    """The recorder's clock (``clock``, else ``_clock``), else ``time.time``."""
    clock = getattr(recorder, "clock", None)
    if not callable(clock):
        clock = getattr(recorder, "_clock", None)
    return clock if callable(clock) else time.time


class AdapterBase:
    """Instruments one framework for one recorder (see the module docstring).

    A subclass sets ``slot`` (its framework's slot), ``_log_once`` (its
    ``log_once``), ``_LOG`` (the prefix of its log keys), ``gate`` (a
    ``ProcessGate`` whose ``on_decided`` is :meth:`_on_decided`) and ``_opts``
    (with ``metadata``), and defines ``_install()``, ``_uninstall(linger)``,
    ``_instrumented()``, ``_run_metadata()``, and the recording calls of its
    wrappers: ``loaded``, ``step_started``, ``step_returned``, ``step_ended``
    (and ``load_started`` where the stall watch is not all of it).

    Args:
      recorder: a :class:`goodput_core.Recorder`.
      per_host: every process writes, with its index on the recorder.
      clock: POSIX-seconds clock for the spans the adapter times; default:
        the recorder's.

    Raises:
      ValueError: no recorder.
    """

    slot: AdapterSlot
    _LOG = ""
    gate: Any
    _opts: Dict[str, Any]
    #: ``(start, end)``: ``start(step)`` records a step's start now and
    #: ``end(step, count, sync_every)`` its end when due (as ``step_returned``),
    #: set by an adapter once each step's return is its end and this process
    #: writes (PyTorch on the CPU); the step wrapper then calls them directly.
    fast_steps: Optional[Tuple[Callable[[int], None], Callable[[int, int, Any], None]]] = None
    #: ``(clock, loaded)``: a load timed with ``clock``, handed on whole as an
    #: input stall by ``loaded(t0)`` once the batch is there, set as
    #: ``fast_steps`` is.
    fast_load: Optional[Tuple[Callable[[], float], Callable[[float], None]]] = None
    #: The compiled form of both (``goodput_core.record.native``'s ``Loop``),
    #: where it is built: the compiled wrappers record through it.
    native_loop: Optional[Any] = None

    @staticmethod
    def _log_once(key: str, msg: str, *args: Any, exc_info: bool = True) -> None:
        raise NotImplementedError

    def __init__(self, recorder: Any, *, per_host: bool,
                 clock: Optional[Callable[[], float]]):
        if recorder is None:
            raise ValueError("recorder is required (use NULL_RECORDER to record nothing)")
        self.recorder = recorder
        self.per_host = bool(per_host)
        self.clock = clock or recorder_clock(recorder)
        # With the recorder's own clock, an event stamped "now" can leave the
        # time to the recorder (one clock read and one conversion fewer).
        self._recorder_stamps = clock is None
        self.active = False
        self.train_thread: Optional[int] = None
        self.stalls: Any = None
        self._lock = threading.Lock()
        self._metadata_done = False

    # ------------------------------------------------------------- lifecycle
    def instrument(self) -> Any:
        """Turns every hook on (idempotent: a second call changes nothing).

        Returns:
          self, so that ``adapter = Adapter(rec).instrument()`` works.
        """
        with self._lock:
            if self.active:
                return self
            self.train_thread = threading.get_ident()
            self.active = True
            try:
                self._install()
            except Exception:
                self._teardown()
                raise
            self.slot.current = self
        adapters_changed()
        self._instrumented()
        return self

    def uninstrument(self) -> None:
        """Turns every hook off and removes listeners, handlers and patches (idempotent)."""
        self._turn_off(False)

    def uninstrument_on_error(self) -> None:
        """Turns off as an exception leaves ``instrumented()``."""
        self.uninstrument()

    def _turn_off(self, linger: bool) -> None:
        with self._lock:
            if not self.active:
                return
            self._teardown(linger)

    def _teardown(self, linger: bool = False) -> None:
        self.active = False
        self._uninstall(linger)
        if self.stalls is not None:
            self.stalls.stop()
        if self.slot.current is self:
            self.slot.current = None
        adapters_changed()

    def _install(self) -> None:
        raise NotImplementedError

    def _uninstall(self, linger: bool) -> None:
        raise NotImplementedError

    def _instrumented(self) -> None:
        """Runs after ``instrument()`` turned the hooks on (outside the lock)."""

    def __enter__(self) -> Any:
        return self.instrument()

    def __exit__(self, *exc: Any) -> None:
        self.uninstrument()

    # ------------------------------------------------------------ recording
    def emit(self, fn: Callable[..., None], *args: Any) -> None:
        """Runs a record call on the writing process (buffered until known).

        Hooks call this; it raises what ``fn`` raises (hooks guard it).
        """
        self.gate.submit(fn, *args)

    def now(self) -> Optional[float]:
        """The adapter's clock, or None if it fails (never raises)."""
        try:
            return self.clock()
        except Exception:
            self._log_once(self._LOG + "clock", "goodput: the clock failed")
            return None

    def load_started(self, t0: float) -> Any:
        """A load begins at ``t0``: the stall watch's token for :meth:`loaded`
        (None: the load is not observed; never raises)."""
        stalls = self.stalls
        if stalls is None:
            return None
        try:
            return stalls.begin(t0)
        except Exception:
            self._log_once(self._LOG + "stall-begin", "goodput: observing the device failed")
            return None

    def record_stall(self, start: float, end: float) -> None:
        """Records an input stall ``[start, end)`` (raises what the recorder raises)."""
        self.gate.submit(record_stall, self.recorder, start, end)

    def _on_decided(self, writes: bool) -> None:
        """The gate decided: a writing process records the run metadata once."""
        if not writes or not self._opts["metadata"] or not self._metadata_ready():
            return
        with self._lock:
            if self._metadata_done:
                return
            self._metadata_done = True
        try:
            self.recorder.record_metadata(**self._run_metadata())
        except Exception:
            self._log_once(self._LOG + "metadata", "goodput: recording run metadata failed")

    def _metadata_ready(self) -> bool:
        """Whether the framework can describe the run now."""
        return True

    def _run_metadata(self) -> Dict[str, Any]:
        raise NotImplementedError

    # ------------------------------------------------------ user-facing API
    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Context manager: ``recorder.step(k)`` through this adapter's process
        gate: start on enter, end on a clean exit (with asynchronous dispatch
        the end is when the block returned: wait for the device inside it
        for a true end)."""
        if not self.active:
            yield
            return
        self.step_started(step)
        yield
        self.step_ended(step)

    def step_started(self, step: int) -> None:
        raise NotImplementedError

    def step_ended(self, step: int) -> None:
        raise NotImplementedError
