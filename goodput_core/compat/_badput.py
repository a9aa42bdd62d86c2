"""The reference's ``BadputType``, exactly: its fourteen members and numbers.

The engine's :class:`goodput_core.buckets.BadputType` has buckets of ours
after them (``HANG``, 15); code written for ml-goodput-measurement iterates
or compares the enum, so the compatibility layer keeps the reference's own.
Members are ``IntEnum``s with the same numbers, so they compare and hash
equal to the engine's members and work as keys of the engine's results.
"""

from __future__ import annotations

import enum

__all__ = ["BadputType"]


class BadputType(enum.IntEnum):
    """The type of badput (names and numbers as in ml-goodput-measurement)."""

    TPU_INITIALIZATION = 1
    TRAINING_PREP = 2
    PROGRAM_STARTUP = 3
    DATA_LOADING_SYNC = 4
    DATA_LOADING_ASYNC = 5
    UNPRODUCTIVE_CHECKPOINT_SAVE_TIME = 6
    UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME = 7
    WASTED_PROGRESS_FROM_DISRUPTION = 8
    INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION = 9
    CUSTOM_BADPUT_EVENTS = 10
    OTHER = 11
    ELASTIC_SLICE_DOWN = 12
    ELASTIC_SCALE_UP = 13
    ELASTIC_REINITIALIZATION = 14

    # Spelled like the reference's plain Enum ('BadputType.OTHER').
    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)
