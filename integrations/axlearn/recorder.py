"""Our AXLearn recorder: ``--recorder_type=goodput_integrations.axlearn:goodput_suite``.

AXLearn imports the module named before the colon, looks the name up in its
recorder registry and calls ``from_flags(fv=FLAGS)``. Our class registers
itself there when AXLearn is importable (it subclasses AXLearn's
``Recorder``) and is a plain class otherwise. It maps every AXLearn event
onto our engine (:class:`goodput_core.compat.goodput.GoodputRecorder`):

==============================  =========================================
AXLearn                         recorded
==============================  =========================================
START_JOB / END_JOB             job start / job end (see below)
START_STEP (step positional)    step start
*_ACCELERATOR_INIT              tpu_init start / end
*_TRAINING_PREPARATION          training_prep start / end
*_DATA_LOADING                  data_loading start / end (and the input stall inside
                                it when an instrumented JAX adapter tracks the steps)
*_CUSTOM_BADPUT_EVENT           custom badput start / end (``custom_badput_event_type=``)
record_event(EventType.X)       X's start, and X's end when the block did not raise;
                                STEP also records the step end (ours)
==============================  =========================================

AXLearn sends END_JOB from a ``finally``, even after a crash. Recording a
job end then would make the crash look like a clean end (the restart gap
would count as idle time, not recovery), so while an exception propagates
(other than ``SystemExit(0)``) END_JOB records a ``disruption`` with cause
``exception:<Type>`` instead; ``end_job_on_crash=true`` restores AXLearn's
behaviour. A ``record_event(EventType.JOB)`` block that raises does the same.
"Propagates" means an exception other than the one already being handled
when START_JOB was recorded: a whole job run inside an unrelated ``except``
block sees that block's exception in ``sys.exc_info()`` at END_JOB, and
still ends cleanly.

Rules kept from AXLearn's contract: ``record`` never raises (misuse is
logged once); ``from_flags`` makes no JAX call (the process index is read
lazily; events before it is known are buffered with their own time, then
written or dropped); background work starts only on process 0, inside
``maybe_monitor_all`` (or ``start_monitoring()`` with ``eager_monitoring``).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, Optional

from goodput_core import NULL_RECORDER
from goodput_integrations.axlearn import _base
from goodput_integrations.axlearn.events import (
    DISRUPTION, LEGACY, LOAD_METHODS, PHASES, Entry, event_name)
from goodput_integrations.axlearn.monitoring import RunMonitors
from goodput_integrations.axlearn.spec import (
    AXLEARN_KEYS,
    OUR_KEYS,
    RecorderSpec,
    config_items,
    parse_spec,
    spec_items,
)
from goodput_integrations.jax import _probe, stalls
from goodput_integrations.jax.gate import ProcessGate

__all__ = ["GoodputSuiteRecorder", "NAME"]

logger = logging.getLogger("goodput")

#: The registry name (AXLearn's own recorder is ``goodput``: names must differ).
NAME = "goodput_suite"
#: The fields of our AXLearn ``Config`` besides ``name``: every spec key.
CONFIG_FIELDS = tuple(k for k in AXLEARN_KEYS + OUR_KEYS if k != "name")

_DISRUPTION_RECORDED_ATTR = "_goodput_disruption_recorded"
_ENGINE_BUILD_DELAY_S = 0.5  # the engine is built this long after the first event
_HAS_JAX: Optional[bool] = None


def _graceful(exc: BaseException) -> bool:
    return isinstance(exc, SystemExit) and exc.code in (None, 0)


def _probe_index() -> Optional[int]:
    """Process index without touching a backend (None while unknown); 0 without JAX."""
    global _HAS_JAX
    if _HAS_JAX is None:
        _HAS_JAX = importlib.util.find_spec("jax") is not None
    if not _HAS_JAX:
        return 0
    return _probe.current_process_index()


class GoodputSuiteRecorder(_base.RecorderBase):
    """AXLearn recorder on our engine (see the module docstring).

    Build it with :meth:`from_flags` (what AXLearn calls) or :meth:`from_spec`.

    Args:
      cfg: AXLearn's config (built from ``spec`` when not given; ignored
        without AXLearn).
      spec: the parsed recorder spec (None: from ``cfg.name``, monitoring off).
      clock: the time source (tests inject a fake; default ``time.time``).
      process_index: returns this process's index, or an int (tests).
    """

    _config = _base.recorder_config(CONFIG_FIELDS)
    if _config is not None:
        #: AXLearn's config of this recorder: ``name`` plus :data:`CONFIG_FIELDS`
        #: (AXLearn's own recorder's fields and ours); only with AXLearn.
        Config = _config
    del _config

    # Test hooks used when from_flags gets none (AXLearn passes only fv=).
    _hook_clock: Optional[Callable[[], float]] = None
    _hook_process_index: Any = None

    def __init__(self, cfg: Any = None, *, spec: Optional[RecorderSpec] = None,
                 clock: Optional[Callable[[], float]] = None, process_index: Any = None):
        if spec is None:
            # built through AXLearn's config: default_config().set(name=..., upload_dir=...,
            # ...).instantiate(); the fields mean what the --recorder_spec keys mean
            if not getattr(cfg, "name", None):
                raise ValueError("GoodputSuiteRecorder needs a name (default_config()"
                                 ".set(name=...)) or a spec (from_flags)")
            spec = parse_spec([f"name={cfg.name}"] + list(config_items(cfg, CONFIG_FIELDS)))
        if _base.AXLEARN_AVAILABLE:
            if cfg is None:
                cfg = type(self).default_config()
                cfg.name = spec.name
                if hasattr(cfg, "upload_dir"):  # our Config: the spec's values, as AXLearn's
                    for key in CONFIG_FIELDS:
                        setattr(cfg, key, getattr(spec, key))
            super().__init__(cfg)
        self.spec = spec
        self._clock = clock or type(self)._hook_clock or time.time
        hook = process_index if process_index is not None else type(self)._hook_process_index
        self._index_hook = hook
        self._forcing = False
        self._lock = threading.RLock()
        self._engine: Any = None
        self._early: list = []
        self._builder: Optional[threading.Thread] = None
        self._build_now = threading.Event()
        self._process_index: Optional[int] = None
        self._gate = ProcessGate(self, per_host=spec.per_host, process_index=self._index)
        self._monitors = RunMonitors(spec, self._clock)
        self._warned: set = set()
        # The exception being handled when START_JOB was recorded (see _crash_at_end_job).
        self._exc_at_start: Optional[BaseException] = None

    # ------------------------------------------------------------ building
    @classmethod
    def from_flags(cls, fv: Any, **hooks: Any) -> "GoodputSuiteRecorder":
        """Builds the recorder from ``fv.recorder_spec`` (``key=value`` strings).

        No JAX call, no I/O: the engine is built, and the store opened, on a
        thread of their own at the first recorded event.

        Args:
          fv: AXLearn's FlagValues, or anything with ``recorder_spec``, or a
            list of ``key=value`` strings, or a dict.
          **hooks: ``clock`` / ``process_index`` (tests).

        Raises:
          ValueError: a bad or missing spec value (unknown keys only warn).
        """
        return cls.from_spec(parse_spec(spec_items(fv)), **hooks)

    @classmethod
    def from_spec(cls, spec: RecorderSpec, **hooks: Any) -> "GoodputSuiteRecorder":
        """Builds the recorder from a parsed spec (see :meth:`from_flags`)."""
        return cls(spec=spec, **hooks)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.spec.name!r}, store={self.spec.store!r})"

    # --------------------------------------------------------- process gate
    @property
    def process_index(self) -> Optional[int]:
        """This process's index once known (None before)."""
        return self._process_index

    @process_index.setter
    def process_index(self, value: int) -> None:  # the gate sets it in per-host mode
        self._process_index = value
        if self._engine is not None:
            self._engine.process_index = value

    def _index(self) -> Optional[int]:
        hook = self._index_hook
        if hook is not None:
            value = hook() if callable(hook) else hook
            return None if value is None else int(value)
        index = _probe_index()
        if index is None and self._forcing:
            # the job needs an answer now (monitoring, job end): ask as AXLearn does
            jax = sys.modules.get("jax")
            index = 0 if jax is None else int(jax.process_index())
        if index is not None and not self.spec.per_host:
            self._process_index = index
        return index

    def _decide(self) -> bool:
        """Decides now whether this process writes (True: it does)."""
        if self._gate.decision is None:
            self._forcing = True
            try:
                self._gate.decide()
            finally:
                self._forcing = False
        return bool(self._gate.decision)

    def _is_lead(self) -> bool:
        return self._decide() and self._gate.process_index == 0

    # ------------------------------------------------------------ engine
    # The engine (imports, recorder, store) is built on a thread of its own at
    # the first event: the first record costs what any other does (docs/quality.md
    # P9). Events recorded meanwhile wait in ``_early``, already time-stamped.
    def _build_engine(self) -> None:
        # Not at once: the statements after the first record run before the
        # build's imports compete for the GIL (a flush builds it at once).
        self._build_now.wait(_ENGINE_BUILD_DELAY_S)
        try:
            # lazy: on the build's own thread, after the first record (see above)
            from goodput_core.compat.goodput import GoodputRecorder

            kwargs: Dict[str, Any] = {"clock": self._clock}
            if self.spec.store:
                kwargs["store"] = self.spec.store
            engine: Any = GoodputRecorder(self.spec.name, self.spec.logger_name, True,
                                          **kwargs)
            if self.spec.run_group:
                engine.record_metadata(run_group=self.spec.run_group)
        except Exception:
            self._warn("engine", "goodput: cannot record to the store %r; recording "
                       "nothing", self.spec.store)
            engine = NULL_RECORDER
        with self._lock:
            if self._process_index is not None and self.spec.per_host:
                engine.process_index = self._process_index
            for method, args, kwargs in self._early:
                self._call_engine(engine, method, args, kwargs)
            self._early = []
            self._engine = engine

    def _call_engine(self, engine: Any, method: str, args: tuple, kwargs: dict) -> None:
        try:
            getattr(engine, method)(*args, **kwargs)
        except Exception:
            self._warn(method, "goodput: %s%r failed (further failures are silent)",
                       method, args)

    def _call(self, method: str, args: tuple, kwargs: dict) -> None:
        engine = self._engine
        if engine is None:
            with self._lock:
                engine = self._engine
                if engine is None:
                    self._early.append((method, args, kwargs))
                    if self._builder is None:
                        self._builder = threading.Thread(
                            target=self._build_engine, daemon=True,
                            name=f"goodput-axlearn-engine-{self.spec.name}")
                        self._builder.start()
                    return
        getattr(engine, method)(*args, **kwargs)

    def _engine_built(self, timeout: Optional[float]) -> Any:
        """The engine once built (waits for its thread up to ``timeout``), or None."""
        builder = self._builder
        if builder is not None and builder is not threading.current_thread():
            self._build_now.set()
            builder.join(timeout)
        return self._engine

    def _submit(self, entry: Entry, args: tuple, kwargs: dict) -> None:
        """Stamps the time now (the call may be buffered) and records; never raises."""
        method, time_kw, pos = entry
        if method in LOAD_METHODS:
            self._observe_load(method == LOAD_METHODS[0])
        try:
            if len(args) <= pos and time_kw not in kwargs:
                kwargs = dict(kwargs)
                kwargs[time_kw] = self._clock()
            self._gate.submit(self._call, method, args, kwargs)
        except Exception:
            self._warn(method, "goodput: %s%r failed (further failures are silent)",
                       method, args)

    def _observe_load(self, starts: bool) -> None:
        """Input stalls, through an instrumented JAX adapter that tracks the
        steps (see goodput_integrations.jax.stalls); never raises."""
        try:
            if starts:
                self._stall_load = stalls.begin_observed_load()
            else:
                handle, self._stall_load = getattr(self, "_stall_load", None), None
                stalls.end_observed_load(handle, self._record_stall)
        except Exception:
            self._warn("stall", "goodput: observing an input stall failed")

    def _record_stall(self, start: float, end: float) -> None:
        self._gate.submit(self._call, "record_input_stall_start_time", (start,), {})
        self._gate.submit(self._call, "record_input_stall_end_time", (end,), {})

    def _warn(self, key: str, msg: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(msg, *args, exc_info=sys.exc_info()[0] is not None)

    # ------------------------------------------------------ AXLearn's API
    def record(self, event: Any, *args: Any, **kwargs: Any) -> None:
        """Records one AXLearn ``Event`` (see the module docstring); never raises."""
        name = event_name(event)
        if name == "END_JOB":
            self._end_job(args, kwargs, self._crash_at_end_job())
            return
        if name == "START_JOB":
            self._exc_at_start = sys.exc_info()[1]
        entry = LEGACY.get(name)
        if entry is None:
            self._warn(f"event-{name}", "goodput: ignoring unknown event %s", event)
            return
        self._submit(entry, args, kwargs)

    def _crash_at_end_job(self) -> Optional[BaseException]:
        """The exception propagating through the job at a legacy END_JOB, or None.

        ``sys.exc_info()`` in AXLearn's ``finally`` is the crash, but it is
        also set inside any ``except`` block around the whole run: the
        exception that was already being handled at START_JOB is not a crash.
        """
        exc = sys.exc_info()[1]
        at_start, self._exc_at_start = self._exc_at_start, None
        return None if exc is at_start else exc

    def _end_job(self, args: tuple, kwargs: dict, exc: Optional[BaseException]) -> None:
        if exc is not None and not _graceful(exc) and not self.spec.end_job_on_crash:
            self._record_crash(exc)
        else:
            self._submit(LEGACY["END_JOB"], args, kwargs)
        try:
            self._decide()  # the job is ending: write or drop what is buffered
        except Exception:
            self._warn("decide", "goodput: could not read the process index at job end")

    def _record_crash(self, exc: BaseException) -> None:
        if getattr(exc, _DISRUPTION_RECORDED_ATTR, False):
            return
        self._submit(DISRUPTION, (f"exception:{type(exc).__name__}",), {})
        try:
            setattr(exc, _DISRUPTION_RECORDED_ATTR, True)
        except Exception:
            pass

    @contextlib.contextmanager
    def record_event(self, event: Any, *args: Any, **kwargs: Any) -> Iterator[None]:
        """Records an ``EventType``'s start, runs the block, records its end
        when the block did not raise (a JOB that raises: a disruption)."""
        value = getattr(event, "value", None)
        phase = PHASES.get(event_name(event)) or (
            PHASES.get(value.upper()) if isinstance(value, str) else None)
        if phase is None:
            self._warn(f"event-{event}", "goodput: ignoring unknown event type %s", event)
            yield
            return
        self._submit(LEGACY[f"START_{phase}"], args, kwargs)
        try:
            yield
        except BaseException as exc:
            if phase == "JOB" and not isinstance(exc, GeneratorExit):
                self._end_job(args, kwargs, exc)
            raise
        if phase == "JOB":
            self._end_job(args, kwargs, None)
        else:
            self._submit(LEGACY[f"END_{phase}"], args, kwargs)

    def start_monitoring(self, **kwargs: Any) -> None:
        """AXLearn calls this at start-up. Monitoring starts in
        :meth:`maybe_monitor_all`, unless ``eager_monitoring=true`` (for
        AXLearn versions without it): then here, stopped at exit."""
        if not self.spec.eager_monitoring:
            logger.info("goodput: monitoring starts inside maybe_monitor_all()")
            return
        if self._start_monitors():
            atexit.register(self._stop_monitors)

    @contextlib.contextmanager
    def maybe_monitor_all(self) -> Iterator[None]:
        """Monitors the run in the background inside the block (process 0 only):
        cumulative goodput to ``upload_dir`` every ``upload_interval`` s,
        rolling windows to ``{upload_dir}/rolling_window_{name}``; on exit a
        final upload that includes this process's pending events."""
        started = self._start_monitors()
        try:
            yield
        finally:
            if started:
                self._stop_monitors()

    def flush(self, timeout: Optional[float] = 10.0) -> bool:
        """Writes what was recorded so far (a fence); True when stored."""
        try:
            self._decide()
        except Exception:
            self._warn("decide", "goodput: could not read the process index")
        start = time.monotonic()
        engine = self._engine_built(timeout)
        if engine is None:
            return self._builder is None  # nothing recorded, or still building: not stored
        if timeout is not None:
            timeout = max(0.0, timeout - (time.monotonic() - start))
        return bool(engine.flush(timeout))

    def close(self, timeout: Optional[float] = 10.0) -> bool:
        """Stops monitoring, flushes and closes the store writer."""
        self._stop_monitors()
        ok = self.flush(timeout)
        engine = self._engine
        return (engine.close(timeout) if engine is not None else True) and ok

    # ---------------------------------------------------------- monitoring
    def _start_monitors(self) -> bool:
        """Starts the monitors on process 0 (built on their own thread);
        False when not started here."""
        with self._lock:
            if (self._monitors.running or not self.spec.enable_monitoring
                    or not self._is_lead()):
                return False
            self._monitors.start()
            return True

    def _stop_monitors(self) -> None:
        self._monitors.stop(self.flush)


_base.register(NAME, GoodputSuiteRecorder)
