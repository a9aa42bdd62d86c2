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
        self._orig_backends: Optional[Callable] = None
        self._wrapper: Optional[Callable] = None
        self._orig_dist: Optional[Callable] = None
        self._dist_wrapper: Optional[Callable] = None
        self.too_late = False

    # --------------------------------------------------------------- install
    def install(self) -> None:
        """Patches backend init and ``jax.distributed.initialize`` (idempotent)."""
        ready = _probe.backends_initialized()
        self.too_late = ready is True
        xb = _probe.xla_bridge()
        if ready is False and xb is not None and self._wrapper is None:
            orig = getattr(xb, "backends", None)
            if callable(orig):
                self._orig_backends = orig
                self._wrapper = self._make_backends_wrapper(orig)
                xb.backends = self._wrapper
        self._patch_distributed()

    def uninstall(self) -> None:
        """Puts back whatever we replaced, if nobody replaced it after us."""
        self._unpatch_backends()
        if self._dist_wrapper is not None:
            try:
                import jax.distributed as dist

                if getattr(dist, "initialize", None) is self._dist_wrapper:
                    dist.initialize = self._orig_dist
            except Exception:
                _probe.log_once("accel-unpatch", "goodput: could not restore jax.distributed")
            self._dist_wrapper = self._orig_dist = None

    def _unpatch_backends(self) -> None:
        xb = _probe.xla_bridge()
        if self._wrapper is not None and xb is not None:
            if getattr(xb, "backends", None) is self._wrapper:
                xb.backends = self._orig_backends
        self._wrapper = None

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

        backends.__wrapped__ = orig  # type: ignore[attr-defined]
        return backends

    def _finish(self, t0: Optional[float], t1: Optional[float]) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        self._unpatch_backends()
        adapter = self._adapter
        try:
            if t0 is not None:
                adapter.emit(_record_init, adapter.recorder, t0, t1)
            adapter.on_backends_ready()
        except Exception:
            _probe.log_once("accel-record", "goodput: recording accelerator init failed")

    def _patch_distributed(self) -> None:
        if self._dist_wrapper is not None:
            return
        try:
            import jax.distributed as dist
        except Exception:
            return
        orig = getattr(dist, "initialize", None)
        if not callable(orig):
            return
        adapter = self._adapter

        def initialize(*args, **kwargs):
            if not adapter.active:
                return orig(*args, **kwargs)
            t0 = adapter.clock()
            result = orig(*args, **kwargs)
            try:
                adapter.emit(_record_init, adapter.recorder, t0, adapter.clock())
            except Exception:
                _probe.log_once("dist-record", "goodput: recording distributed init failed")
            return result

        initialize.__wrapped__ = orig  # type: ignore[attr-defined]
        initialize.__doc__ = getattr(orig, "__doc__", None)
        self._orig_dist, self._dist_wrapper = orig, initialize
        dist.initialize = initialize


def _record_init(recorder: Any, t0: float, t1: float) -> None:
    recorder.record_tpu_init_start_time(t0)
    recorder.record_tpu_init_end_time(t1)
