"""The typed recording API: one method per event kind, plus context managers.

Method names, parameters, positional order and defaults follow
``ml-goodput-measurement`` 0.2.3 where the reference has the method; the rest
follow the same style. Every method is a thin wrapper over ``_record`` (defined by the class that
mixes this in), which validates, enqueues and never raises into the caller
unless the recorder is strict. Whatever a method is given (a number too large
for a float, an object whose ``str()`` or ``__int__`` raises, a deleted
accelerator array), it counts and drops the event instead of raising.

Context managers (each also works as a decorator)::

    with rec.job(): ...                  # job start/end (end only on success;
                                         # an exception records a disruption)
    with rec.tpu_init(): ...             # accelerator initialisation
    with rec.training_preparation(): ...
    with rec.data_loading(): ...         # a blocking load (overlapped=True: prefetched)
    with rec.step(k): ...                # step start/end (end only on success)
    with rec.custom_badput_event("eval"): ...
    with rec.checkpoint_save(step): ...  # blocking part of a non-Orbax save
    with rec.checkpoint_restore(step): ...
    with rec.program_startup("train_step"): ...   # compilation
"""

from __future__ import annotations

import contextlib
import functools
import math
from threading import get_ident as _thread_ident
from typing import Any, Callable, Dict, List, Optional, Tuple

from goodput_core.events import (
    CUSTOM_BADPUT_EVENT_TYPE,
    ELASTIC_WAIT_EVENT_TYPE,
    Kind,
)

__all__ = ["PhaseMixin"]


class _Phase(contextlib.ContextDecorator):
    """Records a start event on enter and an end event on exit.

    ``end_on_error`` says whether the end is recorded when the block raises
    (time spent initialising before a crash was still initialisation time).
    """

    __slots__ = ("_start", "_end", "_end_on_error")

    def __init__(self, start: Callable[[], None], end: Callable[[], None],
                 end_on_error: bool = True):
        self._start, self._end, self._end_on_error = start, end, end_on_error

    def __enter__(self):
        self._start()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None or self._end_on_error:
            self._end()
        return False


class _Job(_Phase):
    """The job context: on an exception, record a disruption, not a job end."""

    __slots__ = ("_on_error",)

    def __init__(self, start, end, on_error):
        super().__init__(start, end, end_on_error=False)
        self._on_error = on_error

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and not issubclass(exc_type, GeneratorExit):
            self._on_error(exc_type)
            try:  # tells an excepthook (JAX adapter) that this crash is recorded
                exc._goodput_disruption_recorded = True
            except Exception:
                pass
        return super().__exit__(exc_type, exc, tb)


class PhaseMixin:
    """Typed ``record_*`` methods and phase context managers.

    Each calls ``self._record``: :meth:`goodput_core.record.recorder.Recorder._record`
    (validates, then the ring's producer; docs/architecture.md, "An event's
    path"), or nothing for a :class:`~goodput_core.record.recorder.NullRecorder`.
    """

    def _record(self, kind: Kind, when: Any, step: Any = None,
                extra: Optional[dict] = None) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # --- the reference's methods (same names, parameters and order)
    #: True between a recorded job end and the next job start: an exception
    #: after a graceful end is not a crash of the job (the JAX excepthook asks).
    job_ended = False

    def record_job_start_time(self, start_time=None):
        """Records the start of the job (or of a new attempt of it)."""
        self.job_ended = False
        self._record(Kind.JOB_START, start_time)

    def record_job_end_time(self, end_time=None):
        """Records a graceful end of the job."""
        self.job_ended = True
        self._record(Kind.JOB_END, end_time)

    #: The thread that recorded the last step start or end: the hang watchdog
    #: lists its stack first (the training loop's, not goodput's own threads).
    progress_thread: Optional[int] = None

    def record_step_start_time(self, step, start_time=None):
        """Records the start (dispatch) of training step ``step``."""
        self.progress_thread = _thread_ident()
        self._record(Kind.STEP_START, start_time, step)

    def record_tpu_init_start_time(self, start_time=None):
        """Records the start of accelerator initialisation."""
        self._record(Kind.TPU_INIT_START, start_time)

    def record_tpu_init_end_time(self, end_time=None):
        """Records the end of accelerator initialisation."""
        self._record(Kind.TPU_INIT_END, end_time)

    def record_training_preparation_start_time(self, start_time=None):
        """Records the start of training preparation."""
        self._record(Kind.TRAINING_PREP_START, start_time)

    def record_training_preparation_end_time(self, end_time=None):
        """Records the end of training preparation."""
        self._record(Kind.TRAINING_PREP_END, end_time)

    def record_data_loading_start_time(self, start_time=None):
        """Records the start of loading a batch."""
        self._record(Kind.DATA_LOADING_START, start_time)

    def record_data_loading_end_time(self, end_time=None):
        """Records the end of loading a batch."""
        self._record(Kind.DATA_LOADING_END, end_time)

    def record_custom_badput_event_start_time(self, start_time=None,
                                              custom_badput_event_type="unknown"):
        """Records the start of a blocking custom event (evaluation, SDC check...)."""
        self._record_text(Kind.CUSTOM_BADPUT_START, start_time, CUSTOM_BADPUT_EVENT_TYPE,
                          custom_badput_event_type)

    def record_custom_badput_event_end_time(self, end_time=None,
                                            custom_badput_event_type="unknown"):
        """Records the end of a blocking custom event."""
        self._record_text(Kind.CUSTOM_BADPUT_END, end_time, CUSTOM_BADPUT_EVENT_TYPE,
                          custom_badput_event_type)

    def record_checkpoint_progress(self, step, checkpoint_start_time):
        """Accepted for compatibility; the reference ignores it too."""
        return None

    # --- the reference's elastic methods
    def record_elastic_slice_counts(self, active_slices, total_slices, available_slices,
                                    timestamp=None):
        """Records the slice counts of an elastic job (non-negative integers)."""
        try:
            extra = {"active_slices": _count(active_slices, "active_slices"),
                     "total_slices": _count(total_slices, "total_slices"),
                     "available_slices": _count(available_slices, "available_slices")}
        except Exception as exc:  # also an __int__ or __eq__ that raises
            self._reject_or_raise(Kind.ELASTIC_SLICE_COUNTS, exc)
            return
        self._record(Kind.ELASTIC_SLICE_COUNTS, timestamp, None, extra)

    def record_elastic_wait_start_time(self, event_type, start_time=None):
        """Records the start of an elastic wait (slice down or scale up)."""
        self._record_text(Kind.ELASTIC_WAIT_START, start_time, ELASTIC_WAIT_EVENT_TYPE,
                          event_type)

    def record_elastic_wait_end_time(self, event_type, end_time=None):
        """Records the end of an elastic wait."""
        self._record_text(Kind.ELASTIC_WAIT_END, end_time, ELASTIC_WAIT_EVENT_TYPE, event_type)

    def record_elastic_reinit_start_time(self, start_time=None):
        """Records the start of an elastic re-initialisation."""
        self._record(Kind.ELASTIC_REINIT_START, start_time)

    def record_elastic_reinit_end_time(self, end_time=None):
        """Records the end of an elastic re-initialisation."""
        self._record(Kind.ELASTIC_REINIT_END, end_time)

    # --- our additions
    def record_step_end_time(self, step, end_time=None):
        """Records the end of step ``step`` (makes the last step measurable)."""
        self.progress_thread = _thread_ident()
        self._record(Kind.STEP_END, end_time, step)

    def record_program_startup_start_time(self, start_time=None, fun_name=None):
        """Records the start of tracing/compilation (``fun_name`` optional)."""
        self._record_text(Kind.PROGRAM_STARTUP_START, start_time, "fun_name", fun_name)

    def record_program_startup_end_time(self, end_time=None, fun_name=None):
        """Records the end of tracing/compilation."""
        self._record_text(Kind.PROGRAM_STARTUP_END, end_time, "fun_name", fun_name)

    def record_checkpoint_save_start_time(self, step=None, start_time=None):
        """Records the start of the blocking part of a checkpoint save."""
        self._record(Kind.CHECKPOINT_SAVE_START, start_time, step)

    def record_checkpoint_save_end_time(self, step=None, end_time=None):
        """Records the end of the blocking part of a checkpoint save."""
        self._record(Kind.CHECKPOINT_SAVE_END, end_time, step)

    def record_checkpoint_restore_start_time(self, step=None, start_time=None):
        """Records the start of a checkpoint restore."""
        self._record(Kind.CHECKPOINT_RESTORE_START, start_time, step)

    def record_checkpoint_restore_end_time(self, step=None, end_time=None):
        """Records the end of a checkpoint restore."""
        self._record(Kind.CHECKPOINT_RESTORE_END, end_time, step)

    def record_input_stall_start_time(self, start_time=None):
        """Records the start of an input stall: the accelerator idle, waiting
        for a batch (adapters that observe the device record these)."""
        self._record(Kind.INPUT_STALL_START, start_time)

    def record_input_stall_end_time(self, end_time=None):
        """Records the end of an input stall."""
        self._record(Kind.INPUT_STALL_END, end_time)

    def record_job_submitted(self, submitted_time=None):
        """Records that the scheduler accepted the job, or requeued it (lifecycle:
        the wait until :meth:`record_resources_granted` is scheduling time)."""
        self._record(Kind.JOB_SUBMITTED, submitted_time)

    def record_resources_granted(self, granted_time=None):
        """Records that every host of an attempt was placed (the job holds its
        resources from here)."""
        self._record(Kind.RESOURCES_GRANTED, granted_time)

    def record_disruption(self, cause: str, time=None):
        """Records that the job was disrupted (``preemption``, ``sigterm``, ...)."""
        self._record_text(Kind.DISRUPTION, time, "disruption_cause", cause, optional=False)

    def record_checkpoint_stats(self, entry: Dict[str, Any]):
        """Records an Orbax checkpoint-manager statistics dict (copied, not mutated).

        The primary time is the start of the span that blocked the loop
        (``checkpoint_manager_blocking_start_time`` for saves,
        ``checkpoint_manager_start_time`` for restores); without one the
        span ends at this call's time.
        """
        try:
            if not isinstance(entry, dict):
                raise ValueError("entry must be a dict")
            extra = self._storable({k: v for k, v in entry.items() if k != "job_name"})
            start_key = ("checkpoint_manager_blocking_start_time"
                         if extra.get("event_type") == "save" else "checkpoint_manager_start_time")
            start, step = extra.get(start_key), extra.get("step")
        except Exception as exc:
            self._reject_or_raise(Kind.CHECKPOINT_STATS, exc)
            return
        self._record_orbax(extra, start, step)

    def record_metadata(self, **fields: Any):
        """Records run metadata (framework, device kind, FLOPs per step, configs...).

        ``num_devices`` and ``num_processes`` must be positive integers,
        ``flops_per_step`` and ``peak_flops_per_device`` positive finite
        numbers; a field that is not is dropped and counted (strict: raises),
        and the fields must be JSON-serialisable (no cycles, string keys).
        """
        try:
            extra, bad = _checked_metadata(fields)
            extra = self._storable(extra)
        except Exception as exc:
            self._reject_or_raise(Kind.METADATA, exc)
            return
        for error in bad:  # strict: raises here
            self._reject_or_raise(Kind.METADATA, error)
        self._record(Kind.METADATA, None, None, extra or None)

    def record_metric(self, name: str, value: float, step=None, time=None):
        """Records a model metric (loss, throughput, MFU...) next to goodput."""
        try:
            extra = {"metric_name": _text(name), "metric_value": float(value)}
        except Exception as exc:  # 10**400, a deleted jax array, a raising __float__
            self._reject_or_raise(Kind.METRIC, exc)
            return
        self._record(Kind.METRIC, time, step, extra)

    # --- context managers and decorators
    def job(self) -> _Phase:
        """Job start on enter, job end on success (an exception records a disruption)."""
        return _Job(self.record_job_start_time, self.record_job_end_time,
                    lambda exc_type: self.record_disruption(f"exception:{exc_type.__name__}"))

    def tpu_init(self) -> _Phase:
        """Accelerator initialisation."""
        return _Phase(self.record_tpu_init_start_time, self.record_tpu_init_end_time)

    def training_preparation(self) -> _Phase:
        """Training preparation (model and checkpoint manager set-up...)."""
        return _Phase(self.record_training_preparation_start_time,
                      self.record_training_preparation_end_time)

    def data_loading(self, overlapped: bool = False) -> _Phase:
        """Loading one batch.

        By default the load blocks: the accelerator waits for it (a synchronous
        loop), so it is ``DATA_LOADING_SYNC`` wherever it lies, inside a step
        span too. Pass ``overlapped=True`` for a prefetching loader whose loads
        run while the accelerator computes: then only a load outside steps is
        blocking time, one inside a step is ``DATA_LOADING_ASYNC`` (reported,
        not badput), as with the reference's ``record_data_loading_*`` methods.
        """
        if overlapped:
            return _Phase(self.record_data_loading_start_time, self.record_data_loading_end_time)
        return _Phase(self._blocking_load_start, self._blocking_load_end)

    def _blocking_load_start(self) -> None:
        # the load (which the reference reads) and its blocking span (rule 16)
        self._record_now_pair(Kind.DATA_LOADING_START, Kind.BLOCKING_LOAD_START)

    def _blocking_load_end(self) -> None:
        self._record_now_pair(Kind.BLOCKING_LOAD_END, Kind.DATA_LOADING_END)

    def _record_now_pair(self, first: Kind, second: Kind) -> None:
        """Two events at the same instant, now (the recorder has a faster one)."""
        self._record(first, None)
        self._record(second, None)

    def step(self, step: int) -> _Phase:
        """One training step: start on enter, end on success."""
        return _Phase(functools.partial(self.record_step_start_time, step),
                      functools.partial(self.record_step_end_time, step), end_on_error=False)

    def custom_badput_event(self, custom_badput_event_type: str = "unknown") -> _Phase:
        """A blocking custom event (evaluation, SDC check...)."""
        return _Phase(
            functools.partial(self.record_custom_badput_event_start_time,
                              None, custom_badput_event_type),
            functools.partial(self.record_custom_badput_event_end_time,
                              None, custom_badput_event_type))

    def checkpoint_save(self, step=None) -> _Phase:
        """The blocking part of a (non-Orbax) checkpoint save."""
        return _Phase(functools.partial(self.record_checkpoint_save_start_time, step),
                      functools.partial(self.record_checkpoint_save_end_time, step))

    def checkpoint_restore(self, step=None) -> _Phase:
        """A checkpoint restore."""
        return _Phase(functools.partial(self.record_checkpoint_restore_start_time, step),
                      functools.partial(self.record_checkpoint_restore_end_time, step))

    def program_startup(self, fun_name: Optional[str] = None) -> _Phase:
        """Tracing and compilation of ``fun_name``."""
        return _Phase(
            functools.partial(self.record_program_startup_start_time, None, fun_name),
            functools.partial(self.record_program_startup_end_time, None, fun_name))

    def track_steps(self, first_step: int = 0) -> Callable:
        """A decorator for a train-step function: each call is the next step.

        Example::

            @rec.track_steps(first_step=start_step)
            def train_step(state, batch): ...
        """
        counter = [first_step]

        def decorate(fn):
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                k = counter[0]
                counter[0] = k + 1
                self.record_step_start_time(k)
                result = fn(*args, **kwargs)
                self.record_step_end_time(k)
                return result

            return wrapper

        return decorate

    # --- helpers shared with the recorder
    def _reject_or_raise(self, kind: Kind, exc: Exception) -> None:
        reject = getattr(self, "_reject", None)
        if reject is not None:
            reject(kind, exc)

    def _storable(self, extra: dict) -> dict:
        """``extra`` when the stores can hold it (the recorder checks; see there)."""
        return extra

    def _record_text(self, kind: Kind, when: Any, key: str, value: Any,
                     optional: bool = True) -> None:
        """Records ``kind`` with ``{key: str(value)}`` (nothing when optional and None)."""
        if value is None and optional:
            extra = None
        else:
            try:
                extra = {key: _text(value)}
            except Exception as exc:  # a str() that raises, a lone surrogate
                self._reject_or_raise(kind, exc)
                return
        self._record(kind, when, None, extra)

    def _record_orbax(self, extra: dict, start: Any, step: Any) -> None:
        self._record(Kind.CHECKPOINT_STATS, start, step, extra)


def _text(value: Any) -> str:
    """``str(value)``; ValueError for text UTF-8 cannot encode (a lone surrogate)."""
    text = value if type(value) is str else str(value)
    if not text.isascii():
        text.encode("utf-8")  # UnicodeEncodeError is a ValueError
    return text


def _count(value: Any, name: str) -> int:
    """A slice count: a non-negative integer (integral floats and numpy ints too)."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    as_int = int(value)
    if as_int != value or as_int < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return as_int


_POSITIVE_INTS = ("num_devices", "num_processes")
_POSITIVE_REALS = ("flops_per_step", "peak_flops_per_device")


def _checked_metadata(fields: Dict[str, Any]) -> Tuple[dict, List[ValueError]]:
    """``fields`` without the numeric fields the calculator cannot use, and why each went."""
    out, bad = dict(fields), []
    for key in _POSITIVE_INTS + _POSITIVE_REALS:
        if key not in out:
            continue
        value = out[key]
        integer = key in _POSITIVE_INTS
        try:
            ok = not isinstance(value, bool) and value is not None and (
                int(value) == value and value >= 1 if integer
                else math.isfinite(float(value)) and float(value) > 0)
        except Exception:
            ok = False
        if not ok:
            del out[key]
            what = "integer" if integer else "finite number"
            bad.append(ValueError(f"metadata {key} must be a positive {what}, "
                                  f"got {_safe_repr(value)}"))
    return out, bad


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)[:80]
    except Exception:
        return f"<unprintable {type(value).__name__}>"
