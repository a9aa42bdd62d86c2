"""One rule for every secret goodput might print: :func:`redact`.

Whatever names a store, a collector or a connection passes :func:`redact`
before it becomes a message, a log line, an exception's text or ``--json``
output. What it hides, wherever it stands in the text:

* **a URL's user part** (``scheme://USERINFO@HOST...``): the password of a
  database URL (``postgresql://user:***@host/db``: the user name stays, it
  says which role), the whole user part of any other URL
  (``https://***@collector:4318``: a bare ``https://TOKEN@host`` is a
  token). The user part ends at the last ``@`` before the first ``/``, so a
  password holding ``?``, ``#`` or ``@`` is hidden whole;
* **a credential parameter**: a URL query parameter, a libpq keyword
  (``host=h password=*** dbname=d``) or a ``name=value`` / ``name: value``
  in free text whose name says it is one (``password``, ``sslpassword``,
  ``token``, ``secret``, ``api_key``, ``authorization``, ``signature``...);
  a quoted keyword value (``password='a b'``) is hidden whole, and so is
  the word after ``Bearer``/``Basic``;
* **every secret this process was given**, scrubbed literally wherever it
  shows (a driver or the OpenTelemetry SDK may echo it in another shape):
  the passwords of the store URLs parsed here and the OTLP headers given in
  code (:func:`remember`), and the values of ``OTEL_EXPORTER_OTLP_HEADERS``
  and its per-signal forms, read at each call. A header entry that is not
  ``name=value`` (``authorization:Bearer%20S``, a stray newline) cannot be
  told apart from its value: the whole entry is the secret. Values shorter
  than :data:`MIN_SCRUBBED` characters are not scrubbed literally (hiding
  every ``a`` of a message protects nothing); the structural rules above
  still hide them.

:func:`guard_loggers` puts a :class:`RedactingFilter` on a library's loggers
(the OpenTelemetry SDK's) so that their own lines pass the same rule; the
``goodput`` logger has it from this module's import on.
This module imports nothing of goodput: every layer may use it.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Iterable, List, Optional, Sequence, Tuple
from urllib.parse import quote, unquote

__all__ = ["MASK", "MIN_SCRUBBED", "HEADER_VARIABLES", "redact", "remember", "secrets_of",
           "keyword_dsn", "is_keyword_dsn", "header_secrets", "RedactingFilter",
           "guard_loggers"]

#: What a secret is replaced with.
MASK = "***"
#: Secrets shorter than this are hidden only where the rules find them, not
#: scrubbed from free text.
MIN_SCRUBBED = 4
#: Schemes whose user name is a role name, not a credential: only the password goes.
_DATABASE_SCHEMES = frozenset({"postgresql", "postgres"})
#: The OTLP request-header variables (OpenTelemetry's exporters read them).
HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
                    "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_LOGS_HEADERS")

_CREDENTIAL = (r"[\w.-]*(?:pass|pwd|secret|token|credential|api[-_]?key|authorization"
               r"|signature|cookie)[\w.-]*|auth")
_CREDENTIAL_NAME = re.compile(rf"(?i)^(?:{_CREDENTIAL})$")
_URL = re.compile(r"(?<![\w+.-])([A-Za-z][A-Za-z0-9+.-]*)://([^\s'\"<>`]*)")
# name=value (a libpq keyword, a query parameter in prose) or name: value (a header)
_PAIR = re.compile(
    rf"(?i)(?<![\w.-])({_CREDENTIAL})(\s*[=:]\s*)"
    r"('(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|(?:(?:bearer|basic|token|digest)\s+)?"
    r"[^\s,;'\"&]+)")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
_ODD_VALUE = re.compile(r"[\x00-\x20\x7f]")
_KEYWORD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*")
#: libpq's connection keywords (a keyword DSN names at least one of them).
_LIBPQ_KEYWORDS = frozenset("""
host hostaddr port dbname user password passfile require_auth channel_binding
connect_timeout client_encoding options application_name fallback_application_name
keepalives keepalives_idle keepalives_interval keepalives_count tcp_user_timeout
replication gssencmode sslmode sslnegotiation sslcompression sslcert sslkey sslkeylogfile
sslpassword sslcertmode sslrootcert sslcrl sslcrldir sslsni requirepeer
ssl_min_protocol_version ssl_max_protocol_version krbsrvname gsslib gssdelegation
service target_session_attrs load_balance_hosts min_protocol_version max_protocol_version
""".split())

_remembered: "set[str]" = set()
_lock = threading.Lock()


def remember(*secrets: Optional[str]) -> None:
    """Adds secrets to scrub from every later :func:`redact` (passwords of URLs
    this process uses, header values given in code). Empty values are ignored."""
    fresh = set()
    for secret in secrets:
        if secret and len(secret) >= MIN_SCRUBBED:
            fresh.update({secret, unquote(secret), quote(secret, safe="")})
    if fresh - _remembered:
        with _lock:
            _remembered.update(fresh)


def header_secrets(text: Optional[str]) -> List[str]:
    """The secrets of an OTLP headers value (``name=value,name2=value2``): each
    value (as written and decoded), and each entry that is not a plain
    ``token=value`` (no ``=``, a name that is not an HTTP token, a control
    character or inner blank in the value) whole: that is the entry the
    OpenTelemetry SDK prints in its warning."""
    out: List[str] = []
    for entry in re.split(r"[ \t]*,[ \t]*", text or ""):
        entry = entry.strip()
        if not entry:
            continue
        name, eq, value = entry.partition("=")
        if not eq or not _HEADER_NAME.match(name.strip()) or _ODD_VALUE.search(value.strip()):
            out.append(entry)  # malformed: no telling the name from the secret
        out.extend(v for v in (value, value.strip(), unquote(value).strip()) if eq and v)
    return list(dict.fromkeys(out))


def _env_secrets() -> List[str]:
    out: List[str] = []
    for name in HEADER_VARIABLES:
        out.extend(header_secrets(os.environ.get(name)))
    return out


def _redact_params(query: str) -> str:
    """``a=1&password=x`` -> ``a=1&password=***`` (also after a ``#``)."""
    parts = re.split(r"([&#;])", query)
    for i in range(0, len(parts), 2):
        name, eq, _ = parts[i].partition("=")
        if eq and _CREDENTIAL_NAME.match(unquote(name).strip()):
            parts[i] = f"{name}={MASK}"
    return "".join(parts)


def _redact_url(scheme: str, rest: str) -> str:
    slash = rest.find("/")
    authority, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    user, at, host = authority.rpartition("@")
    if at:
        if scheme.lower() in _DATABASE_SCHEMES:
            name, colon, _ = user.partition(":")
            user = f"{name}:{MASK}" if colon else name
        else:
            user = MASK
        authority = f"{user}@{host}"
    rest = authority + path
    query = rest.find("?")
    if query >= 0:
        rest = rest[:query + 1] + _redact_params(rest[query + 1:])
    return f"{scheme}://{rest}"


def _redact_pair(match: "re.Match[str]") -> str:
    return f"{match.group(1)}{match.group(2)}{MASK}"


def redact(text: object, extra: Iterable[str] = ()) -> str:
    """``text`` (a URL, a keyword DSN, a message, a log line) with every secret
    replaced by ``***`` (the rules: the module docstring).

    Args:
      text: anything; ``str(text)`` is redacted.
      extra: more secrets to scrub literally (e.g. a store's own passwords).
    """
    text = str(text)
    # Literal secrets first: a structural rule may cut one in two (a header
    # entry broken by a newline), leaving the rest unrecognisable.
    secrets = set(_remembered)
    secrets.update(s for s in _env_secrets() if len(s) >= MIN_SCRUBBED)
    secrets.update(s for s in extra if s and len(s) >= MIN_SCRUBBED)
    for secret in sorted(secrets, key=len, reverse=True):  # a longer one may hold a shorter
        if secret in text:
            text = text.replace(secret, MASK)
    pieces: List[str] = []
    last = 0
    for m in _URL.finditer(text):  # URLs first: their query is theirs
        pieces.append(_PAIR.sub(_redact_pair, text[last:m.start()]))
        pieces.append(_redact_url(m.group(1), m.group(2)))
        last = m.end()
    pieces.append(_PAIR.sub(_redact_pair, text[last:]))
    return "".join(pieces)


def keyword_dsn(text: str) -> Optional[List[Tuple[str, str]]]:
    """A libpq keyword DSN (``host=h port=5432 password='a b' dbname=d``) as
    ``[(keyword, value), ...]``, or None when ``text`` is not one (it must be
    all ``keyword=value`` pairs, naming at least one libpq keyword). Values
    are unquoted as libpq does (``'...'`` with ``\\'`` and ``\\\\``)."""
    pairs: List[Tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        if text[i:].strip() == "":
            break
        m = _KEYWORD.match(text, i)
        if m is None:
            return None
        i = m.end()
        value: List[str] = []
        if i < n and text[i] == "'":
            i += 1
            while i < n and text[i] != "'":
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(text[i])
                i += 1
            if i >= n:
                return None  # an unterminated quote
            i += 1
        else:
            while i < n and not text[i].isspace():
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(text[i])
                i += 1
        pairs.append((m.group(1), "".join(value)))
    if not pairs or not any(k in _LIBPQ_KEYWORDS for k, _ in pairs):
        return None
    return pairs


def is_keyword_dsn(text: str) -> bool:
    """True when ``text`` is a libpq keyword DSN (a PostgreSQL store, never a path)."""
    return "=" in text and "://" not in text and keyword_dsn(text) is not None


def secrets_of(value: str) -> Tuple[str, ...]:
    """The secrets a URL or keyword DSN holds: its password(s) and credential
    parameters (as written and decoded), for :func:`remember`."""
    out: List[str] = []
    pairs = keyword_dsn(value) if is_keyword_dsn(value) else None
    if pairs is not None:
        out.extend(v for k, v in pairs if _CREDENTIAL_NAME.match(k))
    else:
        for m in _URL.finditer(value):
            scheme, rest = m.group(1), m.group(2)
            slash = rest.find("/")
            authority = rest if slash < 0 else rest[:slash]
            user, at, _ = authority.rpartition("@")
            if at:
                name, colon, password = user.partition(":")
                if scheme.lower() in _DATABASE_SCHEMES:
                    out.append(password if colon else "")
                else:
                    out.extend([user, password if colon else name])
            query = rest.find("?")
            for part in re.split(r"[&#;]", rest[query + 1:] if query >= 0 else ""):
                name, eq, v = part.partition("=")
                if eq and _CREDENTIAL_NAME.match(unquote(name).strip()):
                    out.append(v)
    return tuple(dict.fromkeys(s for v in out if v for s in (v, unquote(v))))


class RedactingFilter(logging.Filter):
    """Rewrites a log record's message (and its exception text) through
    :func:`redact` before any handler formats it; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format: show the template alone
            message = str(record.msg)
        record.msg, record.args = redact(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_FILTER = RedactingFilter()


def guard_loggers(prefixes: Sequence[str] = ("opentelemetry",)) -> None:
    """Puts the redacting filter on every logger named ``prefix`` or
    ``prefix.*`` that exists now (idempotent).

    A logger's filter sees only its own records, not its children's, so each
    logger gets it. Call it after importing the library's modules and before
    building its objects: their loggers exist from their import on.
    """
    manager = logging.Logger.manager
    names = [n for n in list(manager.loggerDict)
             if any(n == p or n.startswith(p + ".") for p in prefixes)]
    for name in list(prefixes) + names:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


# goodput's own log lines pass the rule too, whatever a message forgot (most
# of the engine logs on the "goodput" logger itself).
guard_loggers(("goodput",))
