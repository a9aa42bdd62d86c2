"""The adapter an adapter package's module-level wrappers record through.

One :class:`AdapterSlot` per framework (``goodput_integrations.jax._active``,
``goodput_integrations.torch._active``): ``instrument()`` puts an adapter in
it, wrappers (``instrument_iterator``, ``train_step``...) read ``current`` at
every call, so that they fall straight through when nothing is instrumented
and follow a re-instrumentation. The package-level ``instrument()``,
``uninstrument()`` and ``instrumented()`` of each adapter are the slot's.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Dict, Iterator, Optional

__all__ = ["AdapterSlot"]


class AdapterSlot:
    """The most recently instrumented adapter of one framework (``current``), or None."""

    __slots__ = ("current", "_lock")

    def __init__(self) -> None:
        self.current: Optional[Any] = None
        self._lock = threading.Lock()

    def get(self, bound: Optional[Any] = None) -> Optional[Any]:
        """``bound`` if given, else the current adapter; None unless it is active."""
        adapter = bound if bound is not None else self.current
        if adapter is not None and adapter.active:
            return adapter
        return None

    def instrument(self, factory: Callable[..., Any], recorder: Any,
                   options: Dict[str, Any]) -> Any:
        """The active adapter for ``recorder`` and ``options``: the current one
        when it has both, else ``factory(recorder, **options)`` instrumented
        (replacing the current one)."""
        with self._lock:
            current = self.current
            if (current is not None and current.active and current.recorder is recorder
                    and getattr(current, "_given_options", None) == options):
                return current
            if current is not None:
                current.uninstrument()
            adapter = factory(recorder, **options)
            adapter._given_options = dict(options)
            return adapter.instrument()

    def uninstrument(self) -> None:
        """Turns the current adapter off (no-op when none is on)."""
        with self._lock:
            current = self.current
            if current is not None:
                current.uninstrument()
            self.current = None

    @contextlib.contextmanager
    def instrumented(self, factory: Callable[..., Any], recorder: Any,
                     options: Dict[str, Any]) -> Iterator[Any]:
        """Instrumented inside the block, uninstrumented after; when an exception
        leaves the block, through the adapter's ``uninstrument_on_error()``."""
        adapter = self.instrument(factory, recorder, options)
        try:
            yield adapter
        except BaseException:
            adapter.uninstrument_on_error()
            raise
        adapter.uninstrument()
