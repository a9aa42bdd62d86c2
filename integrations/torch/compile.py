"""``torch.compile`` compilation as program startup, from torch's own compile events.

TorchDynamo announces every compilation through
``torch._dynamo.callback.callback_handler`` (torch 2.13): start callbacks run
when a compilation begins and end callbacks when it finishes, each with
``CallbackArgs(callback_trigger, compile_id)``. Triggers: ``DYNAMO`` (a new
frame is traced and compiled, the first compile and every recompile after a
guard failure), ``LAZY_BACKWARD`` (the backward graph compiled at the first
backward), ``CUDAGRAPH_RECORDING`` (cudagraph trees record). The handler runs
them synchronously on the compiling thread, only for the outermost of
nested compilations (a process-wide counter), and a raising callback breaks
the user's compiled call. ``torch._dynamo.reset()`` clears every callback.

Importing TorchDynamo takes seconds, so the adapter never imports it: while
``torch._dynamo`` is not imported yet, ``torch.compile`` is wrapped (it
imports TorchDynamo itself; the callbacks are registered right after the
first call returns, before anything was compiled, and the original is put
back). One start and one end callback per adapter, each guarded so that it
cannot raise and cheap; a compilation becomes one ``program_startup`` span
named ``torch.compile <compile_id>`` (``0/0`` the first compile of frame 0,
``0/1`` its first recompile), placed where it happened (a recompile after
training started is counted inside the step where it ran: semantics rule 6).
:meth:`CompileSpans.ensure` registers them again after a ``reset()``, or
once TorchDynamo was imported another way; the step wrapper calls it (a
list membership test).
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Dict, Optional, Tuple

from goodput_integrations.base.patch import AttributePatch
from goodput_integrations.torch import _probe

__all__ = ["CompileSpans"]


def _handler() -> Optional[Any]:
    """TorchDynamo's callback handler, only if TorchDynamo is imported already."""
    if "torch._dynamo" not in sys.modules:
        return None
    try:
        from torch._dynamo.callback import callback_handler
    except Exception:
        return None
    return callback_handler


def _record_span(recorder: Any, t0: float, t1: float, name: str) -> None:
    recorder.record_program_startup_start_time(t0, name)
    recorder.record_program_startup_end_time(t1, name)


class CompileSpans:
    """Records torch.compile compilations of one adapter as program startup.

    Args:
      adapter: has ``active``, ``now()``, ``emit``, ``recorder`` and
        ``train_thread``.
      any_thread: also record compilations on other threads than the
        training thread (they do not block the loop).

    Attributes:
      compiles: compilations recorded so far (by trigger name).
    """

    def __init__(self, adapter: Any, *, any_thread: bool = False):
        self._adapter = adapter
        self._any_thread = any_thread
        self._open: Dict[Tuple[int, str], float] = {}
        self._lock = threading.Lock()
        self._installed = False
        self._compile_patch = AttributePatch()  # torch.compile, until TorchDynamo is imported
        # bound once: ensure() runs at every step and compares these by identity
        self._start_cb = self._on_start
        self._end_cb = self._on_end
        self._registered_in: Optional[list] = None  # the handler's list we are in
        self.compiles: Dict[str, int] = {}

    # --------------------------------------------------------------- install
    def install(self) -> None:
        """Registers the callbacks now if TorchDynamo is imported, else at the
        first ``torch.compile`` call (idempotent)."""
        self._installed = True
        if not self._register():
            self._wrap_compile()

    def _register(self) -> bool:
        handler = _handler()
        if handler is None:
            return False
        if self._start_cb not in handler.start_callbacks:
            handler.register_start_callback(self._start_cb)
        if self._end_cb not in handler.end_callbacks:
            handler.register_end_callback(self._end_cb)
        self._registered_in = handler.start_callbacks
        self._compile_patch.remove()
        return True

    def _wrap_compile(self) -> None:
        spans = self

        def registering(orig: Any) -> Any:
            def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 (torch's name)
                result = orig(*args, **kwargs)
                if spans._installed:
                    try:
                        spans._register()
                    except Exception:
                        _probe.log_once("dynamo-register", "goodput: registering compile "
                                        "callbacks failed: compile time is not recorded")
                return result

            return compile

        self._compile_patch.apply(sys.modules.get("torch"), "compile", registering, keep_doc=True)

    def ensure(self) -> None:
        """Registers the callbacks if ``torch._dynamo.reset()`` cleared them or
        TorchDynamo was imported since (cheap when nothing changed)."""
        registered = self._registered_in
        if registered is not None and registered and registered[-1] is self._start_cb:
            return  # the usual case: still registered, last (a few attribute loads)
        if not self._installed:
            return
        handler = _handler()
        if handler is not None and self._start_cb not in handler.start_callbacks:
            try:
                self._register()
            except Exception:
                _probe.log_once("dynamo-reinstall", "goodput: registering compile "
                                "callbacks failed")

    def uninstall(self) -> None:
        """Removes the callbacks and the wrapper (those a reset removed are skipped)."""
        self._installed = False
        self._registered_in = None
        self._compile_patch.remove()
        handler = _handler()
        if handler is None:
            return
        for remove, callback in ((handler.remove_start_callback, self._start_cb),
                                 (handler.remove_end_callback, self._end_cb)):
            try:
                remove(callback)
            except ValueError:
                pass  # cleared by torch._dynamo.reset()
            except Exception:
                _probe.log_once("dynamo-remove", "goodput: removing a compile callback failed")

    # -------------------------------------------------------------- callbacks
    def _on_start(self, args: Any) -> None:
        try:
            adapter = self._adapter
            if not adapter.active:
                return
            tid = threading.get_ident()
            if not self._any_thread and tid != adapter.train_thread:
                return
            t0 = adapter.now()
            if t0 is not None:
                with self._lock:
                    self._open[(tid, str(getattr(args, "compile_id", "")))] = t0
        except Exception:
            _probe.log_once("compile-start", "goodput: timing a compilation failed")

    def _on_end(self, args: Any) -> None:
        try:
            adapter = self._adapter
            compile_id = str(getattr(args, "compile_id", ""))
            with self._lock:
                t0 = self._open.pop((threading.get_ident(), compile_id), None)
            if t0 is None or not adapter.active:
                return
            t1 = adapter.now()
            if t1 is None:
                return
            trigger = getattr(getattr(args, "callback_trigger", None), "name", "DYNAMO")
            name = f"torch.compile {compile_id}"
            if trigger != "DYNAMO":
                name += f" ({trigger.lower()})"
            self.compiles[trigger] = self.compiles.get(trigger, 0) + 1
            adapter.emit(_record_span, adapter.recorder, t0, t1, name)
        except Exception:
            _probe.log_once("compile-end", "goodput: recording a compilation failed")
