"""Disruptions: SIGTERM and uncaught exceptions become ``disruption`` events.

A preempted VM gets SIGTERM; a crash ends in ``sys.excepthook``. Recording
the moment and the cause lets the report tell a restart's cause instead of
only inferring it from repeated step numbers. Both hooks chain to what was
installed before (the previous handler is still called, the default action
still terminates the process) and are removed on uninstrument when nobody
installed something on top of them; if someone did, ours stays in the chain
and falls straight through.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Optional

from goodput_integrations.jax import _probe

__all__ = ["DisruptionHooks", "DISRUPTION_RECORDED_ATTR"]

# Set on an exception object once its disruption was recorded (e.g. by a
# ``recorder.job()`` block), so the excepthook does not record it twice.
DISRUPTION_RECORDED_ATTR = "_goodput_disruption_recorded"


class DisruptionHooks:
    """Installs the SIGTERM handler and the excepthook of one adapter.

    Args:
      adapter: has ``active``, ``recorder`` and ``emit``.
      sigterm: install the SIGTERM handler (main thread only: Python allows
        ``signal.signal`` nowhere else).
      excepthook: chain ``sys.excepthook``.
      flush_timeout_s: how long a hook waits for the events to reach the store.
    """

    def __init__(self, adapter: Any, *, sigterm: bool = True, excepthook: bool = True,
                 flush_timeout_s: float = 2.0):
        self._adapter = adapter
        self._want_sigterm = sigterm
        self._want_excepthook = excepthook
        self._flush_timeout = flush_timeout_s
        self._prev_handler: Any = None
        self._sig_installed = False
        self._prev_hook: Optional[Any] = None
        self._hook_installed = False

    def install(self) -> None:
        """Installs the hooks (idempotent)."""
        if self._want_sigterm and not self._sig_installed:
            if threading.current_thread() is threading.main_thread():
                try:
                    self._prev_handler = signal.getsignal(signal.SIGTERM)
                    signal.signal(signal.SIGTERM, self._on_sigterm)
                    self._sig_installed = True
                except (ValueError, OSError):
                    _probe.log_once("sigterm", "goodput: could not install a SIGTERM handler")
            else:
                _probe.log_once("sigterm-thread", "goodput: instrumented outside the main "
                                "thread: no SIGTERM disruption events", exc_info=False)
        if self._want_excepthook and not self._hook_installed:
            self._prev_hook = sys.excepthook
            sys.excepthook = self._on_exception
            self._hook_installed = True

    def uninstall(self) -> None:
        """Restores the previous handler and hook where ours is still the current one."""
        if self._sig_installed:
            try:
                if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                    prev = self._prev_handler
                    signal.signal(signal.SIGTERM, signal.SIG_DFL if prev is None else prev)
                    self._sig_installed = False
            except (ValueError, OSError):  # not on the main thread now: stay in the chain
                pass
        if self._hook_installed and sys.excepthook == self._on_exception:
            sys.excepthook = self._prev_hook
            self._hook_installed = False

    # ----------------------------------------------------------------- hooks
    def _record(self, cause: str) -> None:
        adapter = self._adapter
        try:
            if adapter.active:
                adapter.emit(adapter.recorder.record_disruption, cause)
                adapter.recorder.flush(self._flush_timeout)
        except Exception:
            _probe.log_once("disruption", "goodput: recording a disruption failed")

    def _on_sigterm(self, signum: int, frame: Any) -> Any:
        self._record("sigterm")
        prev = self._prev_handler
        if callable(prev):
            return prev(signum, frame)
        if prev == signal.SIG_IGN:
            return None
        # SIG_DFL (or a handler installed outside Python): terminate as the
        # default action would, with the same exit status.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return None

    def _on_exception(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            # The hook gets the exception that ends the process (not whatever
            # sys.exc_info() holds); one raised after a graceful job end, or
            # already recorded by a job() block, is not a new crash.
            if not getattr(exc, DISRUPTION_RECORDED_ATTR, False) and not getattr(
                    self._adapter.recorder, "job_ended", False):
                self._record(f"exception:{getattr(exc_type, '__name__', 'Exception')}")
        finally:
            prev = self._prev_hook or sys.__excepthook__
            prev(exc_type, exc, tb)
