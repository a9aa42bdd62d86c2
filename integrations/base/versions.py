"""Installed versions of a framework and its friends, read without importing them."""

from __future__ import annotations

import importlib.metadata
from typing import Dict, Iterable, Tuple

__all__ = ["installed_versions"]


def installed_versions(distributions: Iterable[Tuple[str, str]]) -> Dict[str, str]:
    """``{key: version}`` for each ``(key, distribution)`` installed (others left out)."""
    found = {}
    for key, dist in distributions:
        try:
            found[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found
