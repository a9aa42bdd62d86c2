"""Badput buckets and the category codes of the timeline.

:class:`BadputType` has the names and numbers of the reference's
``goodput_utils.BadputType`` (it is an ``IntEnum`` here, so a member also
works as a plain dict key or array code). The timeline labels every instant
of a job's lifetime with one *category code*:

* ``PRODUCTIVE`` (0): training progress that was kept;
* a :class:`BadputType` value (1-15; ``HANG`` (15) is ours, after the
  reference's fourteen);
* ``IDLE`` (100): between an attempt's job end and the next job start, not
  part of total time;
* ``CUSTOM_BASE + k`` (1000 + k): the custom badput event type number ``k``
  (types are numbered in order of first appearance; names are kept by the
  timeline).

``DATA_LOADING_ASYNC`` never labels an instant: asynchronous loads overlap
productive time and are reported as an annotation beside the partition.
"""

from __future__ import annotations

import enum
from typing import Tuple

__all__ = [
    "BadputType",
    "PRODUCTIVE",
    "IDLE",
    "CUSTOM_BASE",
    "BASE_BADPUT",
    "ELASTIC_BADPUT",
    "HANG_BADPUT",
    "PARTITION_BADPUT",
    "PRIORITY",
    "is_custom",
    "custom_code",
]


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
    HANG = 15  # ours: a training loop that stopped making progress (insights)

    # Spell like the reference's plain Enum ('BadputType.OTHER'), not like an
    # int ('11', IntEnum's default since Python 3.11): logs, metric labels and
    # f-strings written against the reference keep their output.
    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


PRODUCTIVE = 0
IDLE = 100
CUSTOM_BASE = 1000

#: The eleven keys every result carries (semantics.md rule 9).
BASE_BADPUT: Tuple[BadputType, ...] = tuple(BadputType(i) for i in range(1, 12))
#: Present in results only for runs that recorded elastic events.
ELASTIC_BADPUT: Tuple[BadputType, ...] = (
    BadputType.ELASTIC_SLICE_DOWN,
    BadputType.ELASTIC_SCALE_UP,
    BadputType.ELASTIC_REINITIALIZATION,
)
#: Present in results only for runs that recorded a hang.
HANG_BADPUT: Tuple[BadputType, ...] = (BadputType.HANG,)
#: Buckets that take part in the partition (all but the async annotation).
PARTITION_BADPUT: Tuple[BadputType, ...] = tuple(
    b for b in BadputType if b is not BadputType.DATA_LOADING_ASYNC)

_B = BadputType
#: Overlap priority, highest first (docs/semantics.md rule 8, whose table is
#: checked against this one); the timeline paints in this order. IDLE
#: outranks all: nothing that happens between attempts counts.
#: WASTED_PROGRESS and the heuristic PROGRAM_STARTUP are applied as overlays
#: at query time (see spans.py) because they depend on events that may
#: arrive much later; OTHER is what nothing else covers. HANG comes below
#: every phase: a hang's span never takes a save's, restore's, evaluation's
#: or compile's time; above blocking loads, because a stuck loader is a hang.
PRIORITY: Tuple[int, ...] = (
    IDLE,
    _B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION,
    _B.WASTED_PROGRESS_FROM_DISRUPTION,
    _B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME,
    _B.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME,
    _B.CUSTOM_BADPUT_EVENTS,
    _B.PROGRAM_STARTUP,
    _B.ELASTIC_REINITIALIZATION,
    _B.ELASTIC_SCALE_UP,
    _B.ELASTIC_SLICE_DOWN,
    _B.TPU_INITIALIZATION,
    _B.TRAINING_PREP,
    _B.HANG,
    _B.DATA_LOADING_SYNC,
    PRODUCTIVE,
    _B.OTHER,
)


def is_custom(code: int) -> bool:
    """True for the category code of a custom badput event type."""
    return code >= CUSTOM_BASE


def custom_code(index: int) -> int:
    """The category code of custom event type number ``index``."""
    return CUSTOM_BASE + index
