"""What the Lightning and Hugging Face callbacks share: phases from hook times.

A trainer calls its callbacks at fixed points of its loop but says nothing
about what ran between two of them. The loops of both trainers fetch the
next batch (and move it to the device) between the last hook of a step
(its end, or the evaluation, log or checkpoint that followed it) and the
hook that starts the next step, and nothing else of note: so the time from
the latest *boundary* to a step's start is that step's load. The other
phases have a hook at their end (validation end, ``on_evaluate``,
``on_save``) or are timed by a wrapper (Lightning's ``save_checkpoint``):
each starts at the boundary before it. :class:`PhaseClock` keeps that
boundary and records through the adapter (its process gate, its stall
watch on CUDA, its step clock); :class:`TrainerRun` is one training run of
a callback: the adapter it records through, the job, the preparation.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from goodput_integrations.base.spans import record_prep
from goodput_integrations.torch import _probe
from goodput_integrations.torch._active import ACTIVE
from goodput_integrations.torch.adapter import TorchAdapter

__all__ = ["CallbackState", "PhaseClock", "TrainerRun"]


class PhaseClock:
    """The boundary between phases, and the step being trained.

    Args:
      adapter: the active :class:`~goodput_integrations.torch.TorchAdapter`.
    """

    def __init__(self, adapter: Any):
        self.adapter = adapter
        self.mark: Optional[float] = None
        self.step: Optional[int] = None   # the step started and not ended
        self.steps = 0                    # steps started (the sync-point count)
        self._load_token: Any = None

    def boundary(self) -> Optional[float]:
        """A phase ended now: the next one starts here (returns the time)."""
        t = self.adapter.now()
        self.mark = t
        if t is not None:
            self._load_token = self.adapter.load_started(t)
        return t

    def load_then_step(self, step: int) -> None:
        """A step starts now: the time since the boundary was its load."""
        adapter = self.adapter
        if self.mark is not None:
            adapter.loaded(self.mark, self._load_token)
        self.mark = self._load_token = None
        self.step = step
        self.steps += 1
        adapter.step_started(step)

    def step_done(self, outputs: Any = None) -> None:
        """The step started last ended (its optimizer step ran)."""
        if self.step is not None:
            self.adapter.step_returned(self.step, self.steps, outputs, "auto")
            self.step = None
        self.boundary()

    def phase(self, record: Any, *args: Any) -> None:
        """A phase that began at the boundary ends now: ``record(recorder, *args, t0, t1)``."""
        t0 = self.mark
        t1 = self.boundary()
        if t0 is None or t1 is None:
            return
        try:
            self.adapter.emit(record, self.adapter.recorder, *args, t0, t1)
        except Exception:
            _probe.log_once("trainer-phase", "goodput: recording a trainer phase failed")

    def timed(self, record: Any, step: Optional[int], fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Runs ``fn`` and records it as ``record`` (a save or restore) from its
        start to its end; the end is a boundary."""
        t0 = self.adapter.now()
        result = fn(*args, **kwargs)
        t1 = self.boundary()
        if t0 is not None and t1 is not None:
            try:
                self.adapter.emit(record, self.adapter.recorder, step, t0, t1)
            except Exception:
                _probe.log_once("trainer-timed", "goodput: recording a checkpoint failed")
        return result


class CallbackState:
    """What a trainer callback (Lightning's, the Hugging Face Trainer's) holds:
    its options, and the run and phase clock between the trainer's start and end."""

    def __init__(self, recorder: Any, record_job: bool, eval_event: str,
                 adapter_options: Dict[str, Any]):
        _probe.require_torch()
        self.recorder = recorder
        self.record_job = record_job
        self.eval_event = eval_event
        self._options = adapter_options
        self._run: Optional["TrainerRun"] = None
        self._clock: Optional[PhaseClock] = None
        super().__init__()  # the framework's callback base, next in the subclass's MRO


class TrainerRun:
    """One training run of a trainer callback, from the trainer's set-up to its end.

    Records through the active PyTorch adapter, or turns one on (and off at
    :meth:`end`) when none is on; :meth:`begin` records the job's start.

    Args:
      recorder: the callback's recorder.
      record_job: record the job start here and its end at :meth:`end`.
      options: :class:`~goodput_integrations.torch.TorchAdapter` options
        for an adapter turned on here.

    Raises:
      What instrumenting or recording raised (callers log it).
    """

    def __init__(self, recorder: Any, record_job: bool, options: Dict[str, Any]):
        adapter = ACTIVE.get()
        self.owns_adapter = adapter is None
        if adapter is None:  # as gtorch.instrument(recorder, **options)
            adapter = ACTIVE.instrument(TorchAdapter, recorder, options)
        self.adapter = adapter
        self.recorder = recorder
        self.record_job = record_job
        self.clock = PhaseClock(adapter)
        self._prep_t0: Optional[float] = None

    def begin(self) -> None:
        """The trainer is set up now: the job starts (``record_job``), and its
        training preparation."""
        adapter = self.adapter
        if self.record_job:
            adapter.emit(self.recorder.record_job_start_time, adapter.now())
        self._prep_t0 = adapter.now()

    def training_starts(self) -> None:
        """Training starts now: the preparation ran from the set-up to here."""
        t0 = self._prep_t0
        t1 = self.clock.boundary()
        if t0 is not None and t1 is not None:
            self.adapter.emit(record_prep, self.recorder, t0, t1)

    def end(self, failed: bool = False) -> None:
        """The run ended: the job end (unless it ``failed``: the crash is its
        end), and the adapter off if it was turned on here (its crash hooks
        lingering after a failure). Never raises."""
        adapter = self.adapter
        try:
            if self.record_job and not failed:
                adapter.emit(self.recorder.record_job_end_time, adapter.now())
        except Exception:
            _probe.log_once("trainer-end", "goodput: recording the job end failed")
        if self.owns_adapter:
            adapter.uninstrument(linger=failed)
