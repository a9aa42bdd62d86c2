"""An exporter built on its first export, on the monitor's exporter thread.

The compatible ``GoodputMonitor`` adds its optional exporters this way (Cloud
Monitoring, the ``GOODPUT_OTEL`` ones): a metadata lookup or a missing client
library never blocks or fails the caller, and a monitor process builds them
the same way there (:func:`goodput_core.exporters.registry.lazy`).
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

from goodput_core.exporters.base import Exporter, MonitorSnapshot

__all__ = ["LazyExporter"]

# the compatible monitor's logger: its users filter on it
logger = logging.getLogger("goodput_core.compat.monitoring")


class LazyExporter(Exporter):
    """Builds its exporter on first use, on the monitor's exporter thread.

    A failure to import or build it is logged once; the exporter then does
    nothing, so the other exporters go on.
    """

    def __init__(self, name: str, factory: Callable[[], Exporter],
                 on_failure: Optional[Callable[[], None]] = None, wants_trace: bool = False,
                 spec: Optional[dict] = None):
        self.name = name
        self.wants_trace = wants_trace
        self._spec = spec
        self._factory = factory
        self._on_failure = on_failure
        self._inner: Optional[Exporter] = None
        self._failed = False

    @property
    def inner(self) -> Optional[Exporter]:
        """The built exporter (None before the first export or after a failure)."""
        return self._inner

    def export(self, snapshot: MonitorSnapshot) -> None:
        if self._inner is None and not self._failed:
            try:
                self._inner = self._factory()
            except Exception as exc:  # noqa: BLE001 - optional exporter: continue without it
                self._failed = True
                if self._on_failure is not None:
                    self._on_failure()
                logger.warning("goodput monitoring: %s export unavailable, continuing without "
                               "it (%s: %s)", self.name, type(exc).__name__, exc)
                return
        if self._inner is not None:
            self._inner.export(snapshot)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()

    def process_spec(self) -> Optional[dict]:
        """How a monitor process builds the same lazy exporter (None: only here)."""
        return self._spec
