"""Spotting a time-zone mistake in a recorded time.

A naive datetime is local time (:func:`goodput_core.events.to_timestamp`). Code
that passes ``datetime.utcnow()`` (naive UTC) on a machine that is not on UTC,
or a naive datetime built for another zone, records times shifted by that
zone's offset: every step then falls outside the job's lifetime and goodput
reads 0 %. Such a shift is a whole number of quarter hours (every zone's
offset is: India is +5:30, Nepal +5:45, the Chatham Islands +12:45) and at
most 14 h. A legitimate backfill is rarely that far off by such a round
amount, so the recorder keeps the time but warns once (see
:meth:`goodput_core.recorder.Recorder`).
"""

from __future__ import annotations

from typing import Optional

__all__ = ["MIN_OFFSET_S", "zone_offset_hours"]

#: Offsets within this many seconds of the clock are never reported.
MIN_OFFSET_S = 1800.0

_QUARTER_HOUR_S = 900.0
_MAX_OFFSET_S = 14 * 3600.0  # UTC-12 .. UTC+14: no zone is further from UTC
_TOLERANCE_S = 60.0  # the time was taken a little before or after the clock read


def zone_offset_hours(recorded: float, clock: float) -> Optional[float]:
    """The time-zone offset ``recorded`` seems to carry, in hours, or None.

    Args:
      recorded: the recorded time (POSIX seconds).
      clock: the recorder's clock when it was recorded (POSIX seconds).

    Returns:
      ``(recorded - clock)`` rounded to a quarter hour, in hours, when it is
      more than 30 minutes, at most 14 h (plus a minute), and within a minute
      of a whole number of quarter hours; else None.
    """
    delta = recorded - clock
    size = abs(delta)
    if not MIN_OFFSET_S < size <= _MAX_OFFSET_S + _TOLERANCE_S:
        return None
    quarters = round(size / _QUARTER_HOUR_S)
    if abs(size - quarters * _QUARTER_HOUR_S) > _TOLERANCE_S:
        return None
    return (quarters / 4.0) if delta > 0 else -(quarters / 4.0)
