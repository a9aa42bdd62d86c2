"""Accelerator initialisation: process-group start and the first CUDA init.

PyTorch emits no event for either. ``torch.distributed.init_process_group``
(the rendezvous with every other rank, and on NCCL the communicator set-up)
is wrapped for as long as the adapter is on: each call is an accelerator-init
span. The first CUDA initialisation happens lazily, through
``torch.cuda._lazy_init`` (every CUDA entry point, the C++ side included,
looks it up on the ``torch.cuda`` module at call time): it is wrapped until
that first init was seen, then put back. On a build or machine without
CUDA there is no device to initialise and nothing is wrapped: the process
group is then the whole accelerator init. A name bound before
``instrument()`` (``from torch.distributed import init_process_group``) is
not reached; call it through ``torch.distributed``.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from goodput_integrations.base.patch import AttributePatch
from goodput_integrations.base.spans import record_init
from goodput_integrations.torch import _probe

__all__ = ["AcceleratorInitTimer"]


class AcceleratorInitTimer:
    """Records ``tpu_init`` spans around process-group init and the first CUDA init.

    Args:
      adapter: has ``active``, ``now()``, ``emit``, ``recorder`` and
        ``on_process_group()``.

    Attributes:
      cuda_too_late: CUDA was initialised before ``install()`` (no span for it).
    """

    def __init__(self, adapter: Any):
        self._adapter = adapter
        self._lock = threading.Lock()
        self._pg = AttributePatch()
        self._cuda = AttributePatch()
        self._cuda_done = False
        self.cuda_too_late = False

    def install(self) -> None:
        """Wraps ``init_process_group`` and, when CUDA exists, its lazy init (idempotent)."""
        torch = _probe.require_torch()
        self._pg.apply(getattr(torch, "distributed", None), "init_process_group",
                       self._timed_process_group, keep_doc=True)
        self._patch_cuda(torch)

    def uninstall(self) -> None:
        """Puts back what we replaced, unless somebody replaced it after us."""
        self._pg.remove()
        self._cuda.remove()

    # ------------------------------------------------------- process group
    def _timed_process_group(self, orig: Callable) -> Callable:
        adapter = self._adapter

        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            if not adapter.active:
                return orig(*args, **kwargs)
            t0 = adapter.now()
            result = orig(*args, **kwargs)  # a failed init is not recorded: the job dies
            try:
                t1 = adapter.now()
                adapter.on_process_group()  # the rank is known now: the gate decides
                if t0 is not None and t1 is not None:
                    adapter.emit(record_init, adapter.recorder, t0, t1)
            except Exception:
                _probe.log_once("pg-record", "goodput: recording process-group init failed")
            return result

        return init_process_group

    # ---------------------------------------------------------------- CUDA
    def _patch_cuda(self, torch: Any) -> None:
        if self._cuda.applied or self._cuda_done:
            return
        cuda = getattr(torch, "cuda", None)
        try:
            if cuda is None or not cuda.is_available():
                return  # nothing to initialise (CPU build or no device)
            if cuda.is_initialized():
                self.cuda_too_late = True
                return
        except Exception:
            return
        adapter = self._adapter

        def timed(orig: Callable) -> Callable:
            def _lazy_init(*args: Any, **kwargs: Any) -> Any:
                if self._cuda_done or not adapter.active or cuda.is_initialized():
                    return orig(*args, **kwargs)
                t0 = adapter.now()
                result = orig(*args, **kwargs)
                self._cuda_finished(t0, adapter.now())
                return result

            return _lazy_init

        self._cuda.apply(cuda, "_lazy_init", timed)

    def _cuda_finished(self, t0: Optional[float], t1: Optional[float]) -> None:
        with self._lock:
            if self._cuda_done:
                return
            self._cuda_done = True
        self._cuda.remove()
        adapter = self._adapter
        try:
            if t0 is not None and t1 is not None:
                adapter.emit(record_init, adapter.recorder, t0, t1)
        except Exception:
            _probe.log_once("cuda-record", "goodput: recording CUDA init failed")
