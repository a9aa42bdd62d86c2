"""Input stalls on CUDA: the part of a load during which the GPU sat idle.

CUDA runs a stream's kernels asynchronously, as JAX does: a step function
returns once its kernels are queued, so a ``next()`` that follows it may
overlap the step still running on the GPU, or leave the GPU idle. The JAX
adapter's :class:`~goodput_integrations.jax.stalls.StallWatch` finds the idle
part of each load from when the latest step became ready; here a step is
observed through a CUDA event recorded on the current stream right after
the step function returned (``torch.cuda.Event.record()``: microseconds, no
sync): ``query()`` says whether the GPU finished it, and the watcher thread's
``synchronize()`` (a blocking-sync event: the thread sleeps, the GIL is
released) stamps when. The error bound is the JAX one (a stall is only ever
under-reported; see :mod:`goodput_integrations.jax.stalls`).

On the CPU, PyTorch is synchronous: the step function returns when its work
is done, so a load on the training thread leaves the compute idle for all
of it: the adapter records every load as an input stall without observing
anything (no watcher thread, no events).
"""

from __future__ import annotations

import threading
from typing import Any, List, Optional, Tuple

from goodput_integrations.jax.stalls import StallWatch

__all__ = ["CudaStep", "cuda_stall_watch"]


class CudaStep:
    """One dispatched step on CUDA: an event recorded after its kernels.

    Has what :class:`StallWatch` needs of a step (``done()``, ``wait()`` and
    its bookkeeping attributes). ``outputs`` are not kept: the event stands
    for all of them (a stream runs in order).
    """

    __slots__ = ("event", "thread", "posted", "ready_at", "failed", "waiting", "lock")

    def __init__(self, outputs: Any, thread: int):
        import torch

        event = torch.cuda.Event(blocking=True)  # the watcher sleeps, it does not spin
        event.record()
        self.event = event
        self.thread = thread
        self.posted = False
        self.ready_at: Optional[float] = None
        self.failed = False
        self.waiting: List[Tuple[float, float, Any]] = []
        self.lock = threading.Lock()

    def done(self) -> Optional[bool]:
        """Whether the GPU finished the step's work (never None: the event stays)."""
        return bool(self.event.query())

    def wait(self) -> bool:
        """Blocks until the GPU finished the step's work (the GIL is released)."""
        self.event.synchronize()
        return True


def cuda_stall_watch(clock: Any) -> StallWatch:
    """A :class:`StallWatch` that observes steps through CUDA events."""
    return StallWatch(clock, step_type=CudaStep)
