"""Disruptions: the JAX adapter's SIGTERM and excepthook hooks, and a crash
that reaches the store although the launcher stops the process at once.

When one worker dies, torchrun stops the others with SIGTERM within
milliseconds. A rank whose collective failed with its peer gone is then
unwinding an exception: ``rec.job()`` records the ``exception:<Type>``
disruption as the exception leaves it, but the writer thread has not stored
it yet, and SIGTERM's default action ends the process before the exit flush
does. So when the exception passes through ``instrumented()``, the hooks do
not go away with the rest of the adapter: they *linger* until the exception
has been reported. A SIGTERM meanwhile, or the excepthook, first flushes
the recorder (at most ``flush_timeout_s``), then does what it would have
done (the default action, the previous hook). The hooks remove themselves
after the excepthook ran.
"""

from __future__ import annotations

from typing import Any

from goodput_integrations.jax.signals import DisruptionHooks
from goodput_integrations.torch import _probe

__all__ = ["LingeringHooks"]


class LingeringHooks(DisruptionHooks):
    """:class:`DisruptionHooks` that can outlive their adapter after a crash."""

    lingering = False

    def linger(self) -> None:
        """The adapter is off but an exception is on its way out: flush on it."""
        self.lingering = True

    def _flush(self) -> None:
        try:
            self._adapter.recorder.flush(self._flush_timeout)
        except Exception:
            _probe.log_once("torch-linger-flush", "goodput: flushing after a crash failed")

    def _record(self, cause: str) -> None:
        try:
            self._adapter.flush_pending()  # a load's stall waiting for its step
        except Exception:
            _probe.log_once("torch-flush-pending", "goodput: recording a load failed")
        if self.lingering:  # the crash is recorded (rec.job()): make it durable
            self._flush()
            return
        super()._record(cause)

    def _on_exception(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self.lingering:
            return super()._on_exception(exc_type, exc, tb)
        try:
            self._flush()
            super()._on_exception(exc_type, exc, tb)
        finally:
            self.lingering = False
            self.uninstall()
        return None
