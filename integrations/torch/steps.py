"""Training steps: a wrapper that numbers each call and times it from completed work.

* **CPU**: PyTorch runs a step synchronously; when the step function
  returns its work is done. Every return is therefore a sync point; the
  step end is recorded at every ``sync_every``-th return (default 10: each
  recorded event costs a 1 ms step about 0.3-1 % in the cold caches the step
  leaves; the time between two recorded ends is work completed, shared by
  the steps between them; ``sync_every=1``: exact per-step times).
* **CUDA**: the function returns once its kernels are queued. The step's
  start is its launch (as JAX's dispatch); every ``sync_every`` steps the
  wrapper waits for the GPU (``torch.cuda.synchronize()`` of the current
  device) and records the step end there, so the time between two sync
  points is work the GPU completed, shared by the steps between them.
  With ``sync_every=None`` nothing waits and no step end is recorded:
  steps then run from launch to launch, which the bounded CUDA launch queue
  keeps close to the GPU's pace but not exact. Default (``"auto"``): 100
  on CUDA (one pipeline drain per 100 steps), 10 on the CPU.

Which device a step runs on is decided at its first call (a CUDA context
exists: CUDA; else the CPU) unless the adapter was told (``device=``).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from goodput_integrations.base.steps import StepCounter, counted_steps
from goodput_integrations.torch._active import ACTIVE

__all__ = ["StepCounter", "track_steps", "check_sync_every"]

SyncEvery = Union[int, str, None]


def check_sync_every(sync_every: SyncEvery) -> SyncEvery:
    """Validates a ``sync_every`` option (``"auto"``, None or a positive int)."""
    if sync_every is None or sync_every == "auto":
        return sync_every
    if isinstance(sync_every, bool) or not isinstance(sync_every, int) or sync_every < 1:
        raise ValueError(f"sync_every must be a positive int, 'auto' or None, got {sync_every!r}")
    return sync_every


def track_steps(fn: Optional[Callable] = None, *, first_step: int = 0,
                sync_every: SyncEvery = "auto", adapter: Optional[Any] = None) -> Any:
    """Wraps a train-step function: each call is the next step.

    The counter advances on every call, recorded or not, so numbering stays
    right when instrumentation is switched on later. The wrapper exposes
    ``.counter`` (a :class:`StepCounter`) and ``__wrapped__``.

    Args:
      fn: the step function (forward, backward, optimizer step; compiled or
        not); omit to get a decorator.
      first_step: the number of the first call (the step restored from a
        checkpoint: steps done so far).
      sync_every: record the step end every N steps (on CUDA after waiting
        for the GPU; module docstring); ``"auto"``: the adapter's setting.
      adapter: a specific :class:`TorchAdapter`; default: the instrumented one.

    Returns:
      The wrapped function (same arguments and results).

    Example::

        train_step = gtorch.train_step(step_fn, first_step=restored_step)
        for x, y in loader:
            loss = train_step(x, y)
    """
    check_sync_every(sync_every)

    def decorate(func: Callable) -> Callable:
        return counted_steps(func, first_step=first_step, sync_every=sync_every,
                             adapter=adapter, slot=ACTIVE, compiled=True)

    return decorate if fn is None else decorate(fn)
