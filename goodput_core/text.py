"""Text from a store, made safe to print on a terminal.

Run names, event types and metric names are user data: a name holding
terminal escape sequences (``\\x1b]...``) must not reach a terminal raw, and a
lone surrogate must not make ``print`` fail. :func:`printable` escapes C0 and
C1 control characters, DEL, bidirectional overrides and lone surrogates as
``\\xNN`` / ``\\uNNNN``; everything else is left as it is.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: "re.Match[str]") -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every character that could drive a terminal escaped (see above)."""
    return text if text.isprintable() else _UNSAFE.sub(_escape, text)
