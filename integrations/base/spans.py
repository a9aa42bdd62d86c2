"""A span recorded with explicit times: the recorder's start and end calls of one kind.

Hooks time a phase themselves and hand the pair to the adapter's process
gate (``adapter.emit(record_save, recorder, step, t0, t1)``), which runs it
on the writing process only.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["record_custom", "record_init", "record_load", "record_prep", "record_restore",
           "record_save", "record_stall"]


def record_init(recorder: Any, t0: float, t1: float) -> None:
    """Accelerator initialisation ``[t0, t1)``."""
    recorder.record_tpu_init_start_time(t0)
    recorder.record_tpu_init_end_time(t1)


def record_prep(recorder: Any, t0: float, t1: float) -> None:
    """Training preparation ``[t0, t1)``."""
    recorder.record_training_preparation_start_time(t0)
    recorder.record_training_preparation_end_time(t1)


def record_load(recorder: Any, t0: float, t1: float) -> None:
    """A data load ``[t0, t1)``."""
    recorder.record_data_loading_start_time(t0)
    recorder.record_data_loading_end_time(t1)


def record_stall(recorder: Any, start: float, end: float) -> None:
    """An input stall ``[start, end)``."""
    recorder.record_input_stall_start_time(start)
    recorder.record_input_stall_end_time(end)


def record_save(recorder: Any, step: Optional[int], t0: float, t1: float) -> None:
    """A checkpoint save of ``step``, ``[t0, t1)``."""
    recorder.record_checkpoint_save_start_time(step, t0)
    recorder.record_checkpoint_save_end_time(step, t1)


def record_restore(recorder: Any, step: Optional[int], t0: float, t1: float) -> None:
    """A checkpoint restore of ``step``, ``[t0, t1)``."""
    recorder.record_checkpoint_restore_start_time(step, t0)
    recorder.record_checkpoint_restore_end_time(step, t1)


def record_custom(recorder: Any, kind: str, t0: float, t1: float) -> None:
    """A custom badput event of type ``kind``, ``[t0, t1)``."""
    recorder.record_custom_badput_event_start_time(t0, kind)
    recorder.record_custom_badput_event_end_time(t1, kind)
