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
watch on CUDA, its step clock).
"""

from __future__ import annotations

from typing import Any, Optional

from goodput_integrations.torch import _probe

__all__ = ["PhaseClock", "record_custom", "record_save", "record_restore"]


def record_custom(recorder: Any, kind: str, t0: float, t1: float) -> None:
    recorder.record_custom_badput_event_start_time(t0, kind)
    recorder.record_custom_badput_event_end_time(t1, kind)


def record_save(recorder: Any, step: Optional[int], t0: float, t1: float) -> None:
    recorder.record_checkpoint_save_start_time(step, t0)
    recorder.record_checkpoint_save_end_time(step, t1)


def record_restore(recorder: Any, step: Optional[int], t0: float, t1: float) -> None:
    recorder.record_checkpoint_restore_start_time(step, t0)
    recorder.record_checkpoint_restore_end_time(step, t1)


def record_prep(recorder: Any, t0: float, t1: float) -> None:
    recorder.record_training_preparation_start_time(t0)
    recorder.record_training_preparation_end_time(t1)


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
