"""Parsing and formatting of the times, durations and windows users type.

Shared by the command-line tools (``goodput report``, ``goodput timeline``,
``goodput monitor``) so every command accepts the same syntax:

* **duration**: a number with a unit, ``30s``, ``15m``, ``1h``, ``2d``,
  ``1w``, ``250ms``, or a sum of them, ``1h30m`` / ``1h 30m``; a bare number
  is seconds. Never negative.
* **time**: an ISO-8601 datetime (``2024-05-01T12:00:00``, ``...Z``,
  ``...+02:00``, or a date; naive means the machine's local time, as
  everywhere in goodput and in Python), or
  POSIX seconds (``1714564800`` or ``1714564800.25``).
* **interval** ``START/END``: two times; either side may instead be a
  duration with a unit, counted from the other side (``2024-05-01T12:00/1h``
  is the hour after noon, ``1h/2024-05-01T12:00`` the hour before).
* **window**: a duration (the last N seconds, ending at a reference time the
  caller chooses, e.g. the run's end) or an interval.

Errors raise :class:`TimeSpecError` (a ``ValueError``) with a message that
says what was expected, ready to print as one line.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import re
from typing import Optional, Tuple

from goodput_core.events import to_timestamp

__all__ = [
    "TimeSpecError",
    "Window",
    "parse_duration",
    "parse_time",
    "parse_interval",
    "parse_window",
    "format_duration",
    "format_time",
]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
# "ms" before "m" and "s" so that 250ms is not read as 250m + s
_TERM = re.compile(rf"\s*({_NUMBER})\s*(ms|s|m|h|d|w)\s*", re.IGNORECASE)
_BARE_NUMBER = re.compile(rf"^\s*[+-]?{_NUMBER}(?:[eE][+-]?\d+)?\s*$")
_DURATION_HELP = "a duration like 30s, 15m, 1h, 2d or 1h30m"
_TIME_HELP = "an ISO-8601 datetime (naive = local time) or POSIX seconds"
_UTC = _dt.timezone.utc


class TimeSpecError(ValueError):
    """A time, duration or window the user typed cannot be read."""


def _duration_with_units(text: str) -> Optional[float]:
    """The seconds of ``text`` when it is one or more number+unit terms, else None."""
    pos, total, terms = 0, 0.0, 0
    while pos < len(text):
        m = _TERM.match(text, pos)
        if not m:
            return None
        total += float(m.group(1)) * _UNITS[m.group(2).lower()]
        pos, terms = m.end(), terms + 1
    return total if terms else None


def parse_duration(text: str) -> float:
    """Seconds of a duration such as ``90``, ``30s``, ``1h30m`` or ``2d``.

    Raises:
      TimeSpecError: empty, negative, non-finite or unreadable.
    """
    s = str(text).strip()
    if not s:
        raise TimeSpecError(f"empty duration: expected {_DURATION_HELP}")
    if _BARE_NUMBER.match(s):
        value = float(s)
    else:
        value = _duration_with_units(s)
        if value is None:
            raise TimeSpecError(f"cannot read duration {text!r}: expected {_DURATION_HELP}")
    if not math.isfinite(value) or value < 0:
        raise TimeSpecError(f"duration {text!r} must be a finite, non-negative number of seconds")
    return value


def parse_time(text: str) -> float:
    """POSIX seconds of an ISO-8601 datetime (naive = local time) or of POSIX seconds.

    Raises:
      TimeSpecError: unreadable or non-finite.
    """
    s = str(text).strip()
    if not s:
        raise TimeSpecError(f"empty time: expected {_TIME_HELP}")
    if _BARE_NUMBER.match(s):
        value = float(s)
        if not math.isfinite(value):
            raise TimeSpecError(f"time {text!r} is not finite")
        return value
    iso = s
    if iso[-1] in "zZ":  # Python 3.10's fromisoformat does not accept 'Z'
        iso = iso[:-1] + "+00:00"
    try:
        when = _dt.datetime.fromisoformat(iso)
    except ValueError:
        raise TimeSpecError(f"cannot read time {text!r}: expected {_TIME_HELP}") from None
    return to_timestamp(when)


def parse_interval(text: str) -> Tuple[float, float]:
    """``(start, end)`` POSIX seconds of ``START/END`` (see the module docstring).

    Raises:
      TimeSpecError: no single '/', an unreadable side, two durations, or
        an interval that ends before it starts.
    """
    s = str(text).strip()
    parts = s.split("/")
    if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
        raise TimeSpecError(
            f"cannot read interval {text!r}: expected START/END, each {_TIME_HELP}")
    left, right = (p.strip() for p in parts)
    # a side with a unit is a duration; a bare number is a time (POSIX seconds)
    dl, dr = _duration_with_units(left), _duration_with_units(right)
    if dl is not None and dr is not None:
        raise TimeSpecError(f"interval {text!r} has two durations: one side must be a time")
    if dr is not None:
        start = parse_time(left)
        end = start + dr
    elif dl is not None:
        end = parse_time(right)
        start = end - dl
    else:
        start, end = parse_time(left), parse_time(right)
    if end < start:
        raise TimeSpecError(f"interval {text!r} ends before it starts")
    return start, end


@dataclasses.dataclass(frozen=True)
class Window:
    """A parsed ``--window``: the last ``duration`` seconds, or ``[start, end]``.

    Exactly one of ``duration`` and ``(start, end)`` is set.
    """

    duration: Optional[float] = None
    start: Optional[float] = None
    end: Optional[float] = None
    text: str = ""

    @property
    def relative(self) -> bool:
        """True for "the last N seconds"."""
        return self.duration is not None

    def resolve(self, reference_end: float) -> Tuple[float, float]:
        """``(start, end)`` in POSIX seconds; a relative window ends at ``reference_end``."""
        if self.duration is not None:
            return reference_end - self.duration, reference_end
        return float(self.start), float(self.end)  # type: ignore[arg-type]


def parse_window(text: str) -> Window:
    """A window: a duration (``30s``, ``1h``...) or an interval ``START/END``.

    Raises:
      TimeSpecError: unreadable.
    """
    s = str(text).strip()
    if "/" in s:
        a, b = parse_interval(s)
        return Window(start=a, end=b, text=s)
    try:
        return Window(duration=parse_duration(s), text=s)
    except TimeSpecError:
        raise TimeSpecError(
            f"cannot read window {text!r}: expected {_DURATION_HELP} (the last N), "
            f"or START/END with each side {_TIME_HELP}") from None


def format_duration(seconds: float) -> str:
    """A human-friendly duration: ``0.25s``, ``42.0s``, ``3m 05s``, ``1h 02m 03s``,
    ``2d 01h 00m 00s``; ``-`` for a non-finite value."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    sign = "-" if seconds < 0 else ""
    s = abs(float(seconds))
    if s < 1:
        return f"{sign}{s:.2f}s"
    if round(s, 1) < 60:  # compare as printed: 59.96 s is "1m 00s", not "60.0s"
        return f"{sign}{s:.1f}s"
    whole = int(round(s))  # round first, so 59.6 s does not print as "0m 60s"
    d, rem = divmod(whole, 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    if d:
        return f"{sign}{d}d {h:02d}h {m:02d}m {sec:02d}s"
    if h:
        return f"{sign}{h}h {m:02d}m {sec:02d}s"
    return f"{sign}{m}m {sec:02d}s"


def format_time(t: Optional[float]) -> Optional[str]:
    """UTC ISO-8601 with a ``Z`` (milliseconds when not whole); None for
    None or a non-finite time."""
    if t is None or not math.isfinite(t):
        return None
    # round to the printed precision first: 83.6999998 s prints as .700, not .699
    when = _dt.datetime.fromtimestamp(round(t, 3), tz=_UTC)
    spec = "seconds" if when.microsecond == 0 else "milliseconds"
    return when.replace(tzinfo=None).isoformat(timespec=spec) + "Z"
