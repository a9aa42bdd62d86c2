"""``jax.monitoring`` listeners: registered once, removed on uninstrument.

Facts that shape this module (jax 0.10): listeners run synchronously on the
emitting thread (the training loop, but also Orbax's background threads); an
exception in a listener propagates into the user's ``jit`` call; registering
the same callback twice delivers twice; ``clear_event_listeners()`` may have
removed ours already (its unregister functions then assert). So every
callback here is cheap, lock-free on its fast path, guarded so it cannot
raise, and checks at call time whether its owner is still active.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, List, Tuple

from goodput_integrations.jax import _probe

__all__ = ["ListenerSet", "COMPILE_PREFIX", "compile_listeners"]

COMPILE_PREFIX = "/jax/core/compile/"
CACHE_PREFIX = "/jax/compilation_cache/"
# Cache durations worth keeping as metrics (``compile_time_saved_sec`` can be
# negative: a cache read slower than the compile it saved).
CACHE_METRICS = frozenset((
    "/jax/compilation_cache/compile_time_saved_sec",
    "/jax/compilation_cache/cache_retrieval_time_sec",
))

_REGISTER = {
    "event": ("register_event_listener", "unregister_event_listener",
              "_event_listeners"),
    "duration": ("register_event_duration_secs_listener",
                 "unregister_event_duration_listener", "_event_duration_secs_listeners"),
    "span": ("register_event_time_span_listener",
             "unregister_event_time_span_listener", "_event_time_span_listeners"),
    "scalar": ("register_scalar_listener", "unregister_scalar_listener",
               "_scalar_listeners"),
}


def has_listener_kind(kind: str) -> bool:
    """Whether the installed jax offers listeners of ``kind`` (see ``_REGISTER``)."""
    import jax.monitoring as mon

    return hasattr(mon, _REGISTER[kind][0])


class ListenerSet:
    """Listeners this owner registered, so that it can remove exactly those."""

    def __init__(self):
        self._handles: List[Tuple[str, Callable]] = []

    def __len__(self) -> int:
        return len(self._handles)

    def add(self, kind: str, callback: Callable) -> bool:
        """Registers ``callback`` as a ``kind`` listener; False if jax lacks that kind."""
        import jax.monitoring as mon

        register = getattr(mon, _REGISTER[kind][0], None)
        if register is None:
            return False
        register(callback)
        self._handles.append((kind, callback))
        return True

    def remove_all(self) -> None:
        """Unregisters every listener added here (already-cleared ones are skipped)."""
        import jax.monitoring as mon

        handles, self._handles = self._handles, []
        for kind, callback in reversed(handles):
            unregister = getattr(mon, _REGISTER[kind][1], None)
            try:
                if unregister is not None:
                    unregister(callback)
                    continue
                # Older jax without an unregister function for this kind.
                from jax._src import monitoring as private

                live = getattr(private, _REGISTER[kind][2], None)
                if live is not None and callback in live:
                    live.remove(callback)
            except (AssertionError, ValueError):
                pass  # removed by clear_event_listeners(): nothing to do
            except Exception:
                _probe.log_once("unregister", "goodput: could not remove a jax listener")


def compile_listeners(adapter: Any, listeners: ListenerSet, *,
                      any_thread: bool = False, cache_metrics: bool = True) -> None:
    """Registers the listeners that turn compilation into program-startup spans.

    Each of JAX's compile phases (tracing, lowering to MLIR, backend compile)
    becomes one ``program_startup`` start/end pair with its ``fun_name``; a
    cache hit in jit's dispatch cache emits nothing, so nothing is recorded.
    Compiles emitted on another thread than the one that instrumented (e.g.
    inside Orbax's background commit) do not block the training loop and are
    ignored unless ``any_thread``.

    Args:
      adapter: has ``active`` (bool), ``train_thread`` (thread ident) and
        ``emit(fn, *args)``; its ``recorder`` provides the record methods.
      listeners: where the registrations are kept.
      any_thread: record compiles from every thread.
      cache_metrics: record persistent-compilation-cache durations as metrics.
    """
    get_ident = threading.get_ident

    def record_span(start: float, end: float, fun_name: Any) -> None:
        rec = adapter.recorder
        rec.record_program_startup_start_time(start, fun_name)
        rec.record_program_startup_end_time(end, fun_name)

    def wanted(event: str) -> bool:
        return (adapter.active and event.startswith(COMPILE_PREFIX)
                and (any_thread or get_ident() == adapter.train_thread))

    def on_span(event: str, start_time: float, end_time: float, **kwargs: Any) -> None:
        try:
            if wanted(event):
                adapter.emit(record_span, float(start_time), float(end_time),
                             kwargs.get("fun_name"))
        except Exception:
            _probe.log_once("span-listener", "goodput: compile-span listener failed")

    spans = listeners.add("span", on_span)

    def on_duration(event: str, duration: float, **kwargs: Any) -> None:
        try:
            if not adapter.active:
                return
            if event in CACHE_METRICS:
                if cache_metrics:
                    adapter.emit(adapter.recorder.record_metric, event, float(duration))
            elif not spans and wanted(event):
                # No time-span listener in this jax: the span ends now.
                end = time.time()
                adapter.emit(record_span, end - float(duration), end, kwargs.get("fun_name"))
        except Exception:
            _probe.log_once("duration-listener", "goodput: compile-duration listener failed")

    if cache_metrics or not spans:
        listeners.add("duration", on_duration)
