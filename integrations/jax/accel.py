"""Accelerator initialisation: time the first backend init and distributed init.

JAX emits no event for backend initialisation, and ``import jax`` does not
initialise anything: the first ``jax.devices()``, array creation or ``jit``
call does, through ``jax._src.xla_bridge.backends()``. We wrap that function
(every path goes through it by a module-global lookup) until the first init
has been seen, then put the original back so later calls pay nothing. We also
wrap ``jax.distributed.initialize`` (the coordinator handshake is accelerator
start-up time too). Private helpers are used defensively: if they are gone,
accelerator-init timing is simply off.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from goodput_integrations.base.patch import AttributePatch
from goodput_integrations.base.spans import record_init
from goodput_integrations.jax import _probe

__all__ = ["AcceleratorInitTimer"]


class AcceleratorInitTimer:
    """Records ``tpu_init`` start/end around the first backend init.

    Args:
      adapter: has ``active``, ``clock``, ``recorder``, ``emit`` and
        ``on_backends_ready()``.

    Attributes:
      too_late: True when the backends were already initialised at install
        time (nothing to time; the report has no accelerator-init figure).
    """

    def __init__(self, adapter: Any):
        self._adapter = adapter
        self._lock = threading.Lock()
        self._done = False
        self._backends = AttributePatch()
        self._dist = AttributePatch()
        self.too_late = False

    # --------------------------------------------------------------- install
    def install(self) -> None:
        """Patches backend init and ``jax.distributed.initialize`` (idempotent)."""
        ready = _probe.backends_initialized()
        self.too_late = ready is True
        xb = _probe.xla_bridge()
        if ready is False and xb is not None:
            self._backends.apply(xb, "backends", self._make_backends_wrapper)
        self._patch_distributed()

    def uninstall(self) -> None:
        """Puts back whatever we replaced, if nobody replaced it after us."""
        self._backends.remove()
        self._dist.remove()

    # --------------------------------------------------------------- wrappers
    def _make_backends_wrapper(self, orig: Callable) -> Callable:
        adapter = self._adapter

        def backends(*args, **kwargs):
            if self._done or not adapter.active:
                return orig(*args, **kwargs)
            if _probe.backends_initialized():
                self._finish(None, None)  # initialised behind our back: stop timing
                return orig(*args, **kwargs)
            t0 = adapter.clock()
            result = orig(*args, **kwargs)  # a failed init is not recorded: the job dies
            self._finish(t0, adapter.clock())
            return result

        return backends

    def _finish(self, t0: Optional[float], t1: Optional[float]) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        self._backends.remove()
        adapter = self._adapter
        try:
            if t0 is not None:
                adapter.emit(record_init, adapter.recorder, t0, t1)
            adapter.on_backends_ready()
        except Exception:
            _probe.log_once("accel-record", "goodput: recording accelerator init failed")

    def _patch_distributed(self) -> None:
        if self._dist.applied:
            return
        try:
            import jax.distributed as dist
        except Exception:
            return
        adapter = self._adapter

        def make_wrapper(orig: Callable) -> Callable:
            def initialize(*args, **kwargs):
                if not adapter.active:
                    return orig(*args, **kwargs)
                t0 = adapter.clock()
                result = orig(*args, **kwargs)
                try:
                    adapter.emit(record_init, adapter.recorder, t0, adapter.clock())
                except Exception:
                    _probe.log_once("dist-record", "goodput: recording distributed init failed")
                return result

            return initialize

        self._dist.apply(dist, "initialize", make_wrapper, keep_doc=True)
