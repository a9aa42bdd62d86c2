"""Parsing of configuration values given as text (flags, config files, the CLI).

One implementation for every place that reads user settings: MaxText config
flags, AXLearn ``--recorder_spec`` keys, launcher options. Each function takes
the setting's display name (e.g. ``"goodput flag goodput_prometheus_port"``
or ``"--recorder_spec=prometheus_port"``) and raises ``ValueError`` with
``"<name>=<value>: expected ..."``, a message the user can act on.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Tuple

__all__ = [
    "ORBAX_PROMETHEUS_PORT",
    "OTEL_SIGNALS",
    "parse_bool",
    "parse_otel_signals",
    "parse_port",
    "parse_positive_int",
    "parse_seconds",
    "parse_window_sizes",
]

#: Orbax serves its own Prometheus metrics here: never ours.
ORBAX_PROMETHEUS_PORT = 9431
_TRUE = frozenset({"true", "1", "yes", "y", "on"})
_FALSE = frozenset({"false", "0", "no", "n", "off"})
_OFF = frozenset({"", "none", "off"})
#: What the OpenTelemetry exporters can send: figures as metrics, phases as spans.
OTEL_SIGNALS = ("metrics", "traces")


def _bad(name: str, value: Any, expected: str) -> ValueError:
    return ValueError(f"{name}={value}: expected {expected}")


def _is_blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def parse_bool(value: Any, name: str, *, blank: Optional[bool] = None) -> bool:
    """``true/false/1/0/yes/no/on/off`` (any case), or a bool.

    Args:
      value: the raw value.
      name: the setting's display name (for the error).
      blank: what an empty string means; None makes it an error.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if blank is not None and _is_blank(value):
        return blank
    text = str(value).strip().lower()
    if text in _TRUE | _FALSE:
        return text in _TRUE
    raise _bad(name, value, "true or false")


def parse_positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """An integer >= ``minimum``: an int, an integral float, or its text."""
    number = None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        number = int(value)
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    if number is None or number < minimum:
        raise _bad(name, value, "a positive integer" if minimum == 1
                   else f"an integer >= {minimum}")
    return number


def parse_window_sizes(value: Any, name: str) -> Tuple[int, ...]:
    """Rolling window sizes in seconds: ``"3600,86400"``, a list, or None/"" (none).

    Duplicates are dropped, order kept.
    """
    if _is_blank(value):
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in items:
        if _is_blank(item):
            continue
        size = parse_positive_int(item, name)
        if size not in out:
            out.append(size)
    return tuple(out)


def parse_port(value: Any, name: str) -> Optional[int]:
    """A Prometheus port: None, "", "none", "off" or negative = off; 0 = any free port.

    Raises:
      ValueError: not an integer, above 65535, or Orbax's port 9431.
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in _OFF):
        return None
    try:
        if isinstance(value, bool):
            raise ValueError
        port = int(str(value).strip()) if not isinstance(value, int) else int(value)
    except (TypeError, ValueError):
        raise _bad(name, value, "a port number") from None
    if port < 0:
        return None
    if port > 65535 or port == ORBAX_PROMETHEUS_PORT:
        raise _bad(name, value, f"a port in 0..65535 other than {ORBAX_PROMETHEUS_PORT} "
                                "(Orbax's Prometheus port)")
    return port


def parse_seconds(value: Any, name: str, *, zero_is_unset: bool = False) -> Optional[float]:
    """An optional positive, finite number of seconds (None or "" = unset).

    Args:
      zero_is_unset: 0 means unset (the reference's convention for a
        configured ideal step time) instead of an error.
    """
    if _is_blank(value):
        return None
    try:
        if isinstance(value, bool):
            raise ValueError
        seconds = float(value)
    except (TypeError, ValueError):
        raise _bad(name, value, "seconds") from None
    if seconds == 0 and zero_is_unset:
        return None
    if not (seconds > 0 and math.isfinite(seconds)):
        raise _bad(name, value, "positive seconds")
    return seconds


def parse_otel_signals(value: Any, name: str) -> Tuple[str, ...]:
    """``GOODPUT_OTEL``-style text: which OpenTelemetry signals to send.

    ``metrics``, ``traces`` or ``metrics,traces``; a true value (``1``, ``on``)
    means ``metrics``; blank or a false value means none.
    """
    if _is_blank(value):
        return ()
    text = str(value).strip().lower()
    if text in _TRUE:
        return ("metrics",)
    if text in _FALSE or text in _OFF:
        return ()
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or any(p not in OTEL_SIGNALS for p in parts):
        raise _bad(name, value, "metrics, traces, metrics,traces or a true/false value")
    return tuple(sig for sig in OTEL_SIGNALS if sig in parts)
