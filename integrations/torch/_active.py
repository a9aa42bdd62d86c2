"""The adapter that module-level wrappers use, looked up at call time."""

from __future__ import annotations

from typing import Any, Optional

# The most recently instrumented TorchAdapter, or None. Wrappers read it on
# every call (one global load) so that they fall straight through when
# nothing is instrumented, and follow a re-instrumentation.
current: Optional[Any] = None


def get(bound: Optional[Any] = None) -> Optional[Any]:
    """``bound`` if given, else the current adapter; None unless it is active."""
    adapter = bound if bound is not None else current
    if adapter is not None and adapter.active:
        return adapter
    return None
