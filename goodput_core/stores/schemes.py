"""The registry of store backends: URL scheme -> what the backend declares.

Each backend declares its URLs once, as a :class:`~goodput_core.stores.base.StoreScheme`
named ``SCHEME`` in its module (how to check and open a URL, whether other
processes reach the store, which of its errors are about the events' content,
...); :data:`SCHEMES` lists them. Everything that depends on the kind of store
asks here (:func:`scheme_of`), never compares scheme names itself
(``tests/core/test_layout_stores.py`` checks). A new backend: its subpackage with a
``SCHEME``, and one line in :data:`SCHEMES`.

Importing this module imports the backends' packages only (their ``__init__``
names the store class on first use): no client library, no numpy.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from goodput_core.stores import cloud_logging, memory, postgres, sqlite
from goodput_core.stores.base import StoreScheme

__all__ = ["SCHEMES", "PATHS", "scheme_of", "known", "refuses_content", "shared"]

#: Every backend, in the order the unknown-scheme message lists them.
SCHEMES: Tuple[StoreScheme, ...] = (
    sqlite.SCHEME,
    memory.SCHEME,
    cloud_logging.SCHEME,
    postgres.SCHEME,
)
#: The backend of a bare string that no backend claims (a file path).
PATHS = sqlite.SCHEME

_BY_NAME: Dict[str, StoreScheme] = {name: s for s in SCHEMES for name in s.names}


def scheme_of(url: str) -> Tuple[Optional[StoreScheme], str, str]:
    """``(scheme, name, rest)`` of a store URL, without validating it: the
    backend (None for an unknown ``NAME://``), the scheme's name as written
    (a claimed bare string: the backend's canonical name) and what follows
    ``://`` (a bare string: all of it)."""
    name, sep, rest = url.partition("://")
    if sep:
        return _BY_NAME.get(name), name, rest
    for scheme in SCHEMES:
        if scheme.bare is not None and scheme.bare(url):
            return scheme, scheme.name, url
    return PATHS, PATHS.name, url


def known() -> str:
    """The schemes a URL may have, for messages: ``a://, b:// or c://``."""
    names = [s.name + "://" for s in SCHEMES]
    return ", ".join(names[:-1]) + " or " + names[-1]


def refuses_content(error: BaseException) -> bool:
    """True when a backend says a failed append's error is about the events'
    content (they would fail the same way forever), not an outage."""
    return any(s.refuses_content(error) for s in SCHEMES)


def shared(url: str) -> bool:
    """True unless ``url`` names a store of this process only (``memory://``);
    an unknown scheme counts as shared."""
    scheme = scheme_of(url)[0]
    return scheme is None or scheme.shared
