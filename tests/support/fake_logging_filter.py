"""The Cloud Logging query language, as much of it as the fake server needs.

:func:`parse_filter` parses a filter into a small tree and :func:`matches`
evaluates it on a stored ``LogEntry`` protobuf. Supported: comparisons on
``logName``, ``severity``, ``timestamp``, ``receiveTimestamp``, ``insertId``,
``resource.type``, ``resource.labels.*``, ``labels.*``, ``jsonPayload.*`` and
``textPayload`` with ``= != < <= > >= :`` and ``=~ !~``; ``AND``, ``OR``,
``NOT`` / ``-``, parentheses, implicit ``AND`` between adjacent terms, quoted
strings with backslash escapes, unquoted values, and bare "global" terms
(matched against every value of the entry; ``""`` matches everything).

As in Cloud Logging: ``OR`` binds tighter than ``AND`` (``a AND b OR c`` is
``a AND (b OR c)``), string comparisons ignore case, and an unparseable
filter or an unknown field is an error (:class:`FilterError`, which the
server answers with ``INVALID_ARGUMENT``). A comparison on an absent field is
false.
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
from typing import Any, Dict, List, Tuple

__all__ = ["FilterError", "parse_filter", "parse_time", "matches", "struct_to_python"]

_SEVERITY = {"DEFAULT": 0, "DEBUG": 100, "INFO": 200, "NOTICE": 300, "WARNING": 400,
             "ERROR": 500, "CRITICAL": 600, "ALERT": 700, "EMERGENCY": 800}


class FilterError(ValueError):
    """The filter does not parse, or uses a field the fake does not know."""


_TOKEN = re.compile(r'\s+|(?P<op><=|>=|!=|=~|!~|[=<>:])|(?P<paren>[()])|(?P<str>")'
                    r'|(?P<word>[^\s()"<>=!:]+)')
_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?"
                   r"(Z|[+-]\d\d:\d\d)?$", re.I)


def _tokens(text: str) -> List[Tuple[str, str]]:
    out, i = [], 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        if m is None:
            raise FilterError(f"unexpected {text[i]!r} at {i} in {text!r}")
        if m.group("str"):
            j, chars = m.end(), []
            while True:
                if j >= len(text):
                    raise FilterError(f"unterminated string in {text!r}")
                c = text[j]
                if c == "\\":
                    if j + 1 >= len(text):
                        raise FilterError(f"dangling backslash in {text!r}")
                    chars.append(text[j + 1])
                    j += 2
                elif c == '"':
                    break
                else:
                    chars.append(c)
                    j += 1
            out.append(("str", "".join(chars)))
            i = j + 1
            continue
        if m.group("op"):
            out.append(("op", m.group("op")))
        elif m.group("paren"):
            out.append((m.group("paren"), m.group("paren")))
        elif m.group("word"):
            word = m.group("word")
            out.append(("kw", word) if word in ("AND", "OR", "NOT") else ("word", word))
        i = m.end()
    return out


@functools.lru_cache(maxsize=256)
def parse_time(text: str) -> Tuple[int, int]:
    """RFC 3339 -> (seconds, nanos) UTC."""
    m = _TIME.match(text.strip())
    if m is None:
        raise FilterError(f"not a timestamp: {text!r}")
    y, mo, d, h, mi, s = (int(m.group(k)) for k in range(1, 7))
    frac, zone = m.group(7) or "", m.group(8) or "Z"
    offset = 0
    if zone.upper() != "Z":
        sign = 1 if zone[0] == "+" else -1
        offset = sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    base = _dt.datetime(y, mo, d, h, mi, s, tzinfo=_dt.timezone.utc)
    seconds = int((base - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)).total_seconds())
    return seconds - offset, int(frac.ljust(9, "0")) if frac else 0


class _Parser:
    """Recursive descent; precedence NOT > OR > AND (Cloud Logging's, not SQL's)."""

    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.i = 0

    def peek(self, k: int = 0):
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else (None, None)

    def take(self):
        tok = self.peek()
        self.i += 1
        return tok

    def parse(self):
        if not self.toks:
            return ("true",)
        node = self.conjunction()
        if self.peek()[0] is not None:
            raise FilterError(f"unexpected {self.peek()[1]!r}")
        return node

    def conjunction(self):
        nodes = [self.disjunction()]
        while True:
            kind, value = self.peek()
            if kind == "kw" and value == "AND":
                self.take()
            elif kind is None or kind == ")" or (kind == "kw" and value == "OR"):
                break
            nodes.append(self.disjunction())  # adjacent terms: implicit AND
        return nodes[0] if len(nodes) == 1 else ("and", nodes)

    def disjunction(self):
        nodes = [self.negation()]
        while self.peek() == ("kw", "OR"):
            self.take()
            nodes.append(self.negation())
        return nodes[0] if len(nodes) == 1 else ("or", nodes)

    def negation(self):
        kind, value = self.peek()
        if (kind, value) == ("kw", "NOT"):
            self.take()
            return ("not", self.negation())
        if kind == "word" and value.startswith("-") and len(value) > 1:
            self.toks[self.i] = ("word", value[1:])
            return ("not", self.negation())
        return self.primary()

    def primary(self):
        kind, value = self.take()
        if kind == "(":
            node = self.conjunction()
            if self.take()[0] != ")":
                raise FilterError("missing ')'")
            return node
        if kind in ("word", "str"):
            if kind == "word" and self.peek()[0] == "op":
                op = self.take()[1]
                vkind, literal = self.take()
                if vkind not in ("word", "str"):
                    raise FilterError(f"expected a value after {value}{op}")
                return ("cmp", value, op, literal)
            return ("global", value)
        raise FilterError(f"unexpected {value!r}")


def parse_filter(text: str):
    """Parses a Logging query into a tree (raises :class:`FilterError`)."""
    return _Parser(text or "").parse()


def _value_py(v) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "struct_value":
        return {k: _value_py(x) for k, x in v.struct_value.fields.items()}
    if kind == "list_value":
        return [_value_py(x) for x in v.list_value.values]
    return None if kind in (None, "null_value") else getattr(v, kind)


def _payload(entry) -> Dict[str, Any]:
    # The server may cache the converted payload on its stored entries.
    cached = getattr(entry, "py_payload", None)
    return cached if cached is not None else struct_to_python(entry.json_payload)


def _field(entry, path: str):
    """(kind, value) of a field of a stored entry, or None when it is absent."""
    if path in ("logName", "log_name"):
        return "str", entry.log_name
    if path == "severity":
        return "severity", entry.severity
    if path in ("timestamp", "receiveTimestamp", "receive_timestamp"):
        ts = entry.timestamp if path == "timestamp" else entry.receive_timestamp
        return "time", (ts.seconds, ts.nanos)
    if path in ("insertId", "insert_id"):
        return "str", entry.insert_id
    if path == "textPayload":
        return ("str", entry.text_payload) if entry.HasField("text_payload") else None
    head, _, rest = path.partition(".")
    if head == "resource":
        if rest == "type":
            return "str", entry.resource.type
        if rest.startswith("labels."):
            key = rest[len("labels."):]
            return ("str", entry.resource.labels[key]) if key in entry.resource.labels else None
    elif head == "labels" and rest:
        return ("str", entry.labels[rest]) if rest in entry.labels else None
    elif head == "jsonPayload" and rest:
        if not entry.HasField("json_payload"):
            return None
        value: Any = _payload(entry)
        for part in rest.split("."):
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        if isinstance(value, bool):
            return "str", str(value).lower()
        if isinstance(value, (int, float)):
            return "num", float(value)
        return ("str", value) if isinstance(value, str) else None
    raise FilterError(f"the fake does not support the field {path!r}")


def struct_to_python(struct) -> Dict[str, Any]:
    """A protobuf ``Struct`` as a dict (numbers as floats)."""
    return {k: _value_py(v) for k, v in struct.fields.items()}


def _compare(kind: str, have: Any, op: str, literal: str) -> bool:
    if op in ("=~", "!~"):
        found = re.search(literal, str(have)) is not None
        return found if op == "=~" else not found
    if kind == "time":
        want: Any = parse_time(literal)
    elif kind == "severity":
        want = _SEVERITY.get(literal.upper(), None)
        if want is None:
            want = int(literal) if literal.isdigit() else -1
    elif kind == "num":
        try:
            want = float(literal)
        except ValueError:
            kind, have, want = "str", str(have), literal
    else:
        want = literal
    if kind == "str" and op in ("=", "!=", ":"):
        have, want = have.casefold(), want.casefold()  # Cloud Logging ignores case
    if op == ":":
        return want in have if kind == "str" else have == want
    return {"=": have == want, "!=": have != want, "<": have < want, "<=": have <= want,
            ">": have > want, ">=": have >= want}[op]


def _all_strings(entry) -> List[str]:
    out = [entry.log_name, entry.insert_id, entry.text_payload]
    out += list(entry.labels.values())

    def walk(value):
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif value is not None:
            out.append(str(value))
    if entry.HasField("json_payload"):
        walk(_payload(entry))
    return out


def matches(node, entry) -> bool:
    """Whether a stored entry satisfies a parsed filter."""
    tag = node[0]
    if tag == "true":
        return True
    if tag == "and":
        return all(matches(n, entry) for n in node[1])
    if tag == "or":
        return any(matches(n, entry) for n in node[1])
    if tag == "not":
        return not matches(node[1], entry)
    if tag == "global":
        needle = node[1].casefold()
        return any(needle in s.casefold() for s in _all_strings(entry))
    _, path, op, literal = node
    field = _field(entry, path)
    return field is not None and _compare(field[0], field[1], op, literal)
