"""What every store can hold, checked before writing instead of failing in the store.

SQLite integers are signed 64-bit, text must be valid UTF-8 (a lone surrogate
is not) and the ``extra`` payload must encode as strict JSON (no cycles, no
non-string keys, nothing whose ``str()`` raises, not nested beyond the
encoder's recursion limit). The recorder checks what users hand it at record
time (:mod:`goodput_core.record.recorder`); ``goodput import`` checks every input
line (:mod:`goodput_core.cli.commands.transfer`), so one bad event is skipped and
counted instead of failing a batch.
"""

from __future__ import annotations

import json
from typing import Any

from goodput_core.events import EventRecord

__all__ = ["INT64_MIN", "INT64_MAX", "check_int", "check_text", "check_extra", "check_event", "describe_error"]

INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1


def check_int(value: int, what: str) -> None:
    """Raises ValueError when the int ``value`` does not fit in 64 bits."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{what} must fit in 64 bits, got {value}")


def check_text(value: str, what: str) -> None:
    """Raises ValueError for text UTF-8 cannot encode (a lone surrogate)."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{what} {value!r} is not valid Unicode text") from None


def check_extra(extra: Any) -> None:
    """Raises ValueError when ``extra`` cannot be stored as strict JSON."""
    # lazy: only nested payloads need it (import goodput_core stays light)
    from goodput_core.stores.strict_json import dumps

    try:
        text = dumps(extra)  # ASCII: every non-ASCII character is escaped
        if "\\ud" in text:  # a surrogate escape: fine as a pair, unencodable alone
            json.dumps(json.loads(text), ensure_ascii=False).encode("utf-8")
    except Exception as exc:  # TypeError, ValueError, RecursionError, a raising str()
        raise ValueError(f"payload cannot be stored as JSON: {describe_error(exc)}") from None


def check_event(e: EventRecord) -> None:
    """Raises ValueError when a store could not hold ``e`` (see the module docstring)."""
    for value, what in ((e.step, "step"), (e.process_index, "process_index"), (e.pid, "pid"),
                        (e.seq, "seq")):
        if value is not None:
            check_int(value, what)
    for text, what in ((e.run, "run name"), (e.host, "host"), (e.attempt, "attempt")):
        check_text(text, what)
    if e.extra is not None:
        check_extra(e.extra)


def describe_error(error: BaseException) -> str:
    """``str(error)``, even for an exception whose ``__str__`` raises."""
    try:
        return str(error) or type(error).__name__
    except Exception:
        return f"<unprintable {type(error).__name__}>"
