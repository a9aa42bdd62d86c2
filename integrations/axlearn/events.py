"""What each AXLearn recorder event records on our engine (the table in
:mod:`goodput_integrations.axlearn.recorder`'s docstring): the engine method,
the keyword of its time and the position of that time among AXLearn's
arguments."""

from __future__ import annotations

from typing import Any, Dict, Tuple

__all__ = ["DISRUPTION", "Entry", "LEGACY", "LOAD_METHODS", "PHASES", "event_name"]

Entry = Tuple[str, str, int]  # (engine method, time keyword, time's positional index)
LEGACY: Dict[str, Entry] = {
    "START_JOB": ("record_job_start_time", "start_time", 0),
    "END_JOB": ("record_job_end_time", "end_time", 0),
    "START_STEP": ("record_step_start_time", "start_time", 1),
    "END_STEP": ("record_step_end_time", "end_time", 1),
    "START_ACCELERATOR_INIT": ("record_tpu_init_start_time", "start_time", 0),
    "END_ACCELERATOR_INIT": ("record_tpu_init_end_time", "end_time", 0),
    "START_TRAINING_PREPARATION": ("record_training_preparation_start_time", "start_time", 0),
    "END_TRAINING_PREPARATION": ("record_training_preparation_end_time", "end_time", 0),
    "START_DATA_LOADING": ("record_data_loading_start_time", "start_time", 0),
    "END_DATA_LOADING": ("record_data_loading_end_time", "end_time", 0),
    "START_CUSTOM_BADPUT_EVENT": ("record_custom_badput_event_start_time", "start_time", 0),
    "END_CUSTOM_BADPUT_EVENT": ("record_custom_badput_event_end_time", "end_time", 0),
}
DISRUPTION: Entry = ("record_disruption", "time", 1)
LOAD_METHODS = ("record_data_loading_start_time", "record_data_loading_end_time")
# EventType names (and values) -> the legacy suffix of its start/end events
PHASES = {"JOB": "JOB", "STEP": "STEP", "ACCELERATOR_INIT": "ACCELERATOR_INIT",
           "TRAINING_PREPARATION": "TRAINING_PREPARATION", "DATA_LOADING": "DATA_LOADING",
           "CUSTOM_BADPUT_EVENT": "CUSTOM_BADPUT_EVENT", "TPU_INIT": "ACCELERATOR_INIT"}


def event_name(event: Any) -> str:
    """An event (an AXLearn enum member or its name) as its upper-case name."""
    name = getattr(event, "name", None)
    return str(name if isinstance(name, str) else event).upper()
