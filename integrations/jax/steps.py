"""Training steps: a decorator that numbers and times each call.

JAX dispatches asynchronously: a jitted step returns as soon as the work is
enqueued, so the step's start is its dispatch time (as in the reference) and
the span from one start to the next is the step time once the pipeline is
full. A step end is recorded only when we actually waited for the result
(every ``sync_every`` steps): an end taken at dispatch return would be a lie
for the last step of a run. Blocking every N steps keeps the step clock from
drifting ahead of the device without a sync per step.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from goodput_integrations.base.steps import StepCounter, counted_steps
from goodput_integrations.jax._active import ACTIVE

__all__ = ["StepCounter", "track_steps", "block_until_ready"]


def block_until_ready(result: Any) -> None:
    """Waits until the step's outputs are computed (a sync point)."""
    import jax

    jax.block_until_ready(result)


def track_steps(fn: Optional[Callable] = None, *, first_step: int = 0,
                sync_every: Optional[int] = None, adapter: Optional[Any] = None) -> Any:
    """Decorator for a train-step function: each call is the next step.

    The counter advances on every call, recorded or not, so numbering stays
    right when instrumentation is switched on later. The wrapper exposes
    ``.counter`` (a :class:`StepCounter`) and ``__wrapped__``.

    Args:
      fn: the step function (usually jitted); omit to get a decorator.
      first_step: the number of the first call (e.g. the restored step).
      sync_every: wait for the result every N steps and record the step end;
        default: the adapter's ``sync_every`` (None: never wait).
      adapter: a specific :class:`JaxAdapter`; default: the instrumented one.

    Returns:
      The wrapped function (same arguments and results).

    Example::

        @track_steps(first_step=restored_step)
        @jax.jit
        def train_step(state, batch): ...
    """
    if sync_every is not None and (not isinstance(sync_every, int) or sync_every < 1):
        raise ValueError(f"sync_every must be a positive int or None, got {sync_every!r}")

    def decorate(func: Callable) -> Callable:
        return counted_steps(func, first_step=first_step, sync_every=sync_every,
                             adapter=adapter, slot=ACTIVE)

    return decorate if fn is None else decorate(fn)
