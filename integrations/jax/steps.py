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

import contextlib
import functools
from typing import Any, Callable, Iterator, Optional

from goodput_integrations.jax import _active

__all__ = ["StepCounter", "track_steps", "gated_step"]


class StepCounter:
    """The number the next call of a tracked step function records.

    Set ``next_step`` after restoring a checkpoint to resume the numbering.
    """

    __slots__ = ("next_step", "first_step")

    def __init__(self, first_step: int):
        self.first_step = self.next_step = int(first_step)


def _block(result: Any) -> None:
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
        counter = StepCounter(first_step)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            k = counter.next_step
            counter.next_step = k + 1
            active = adapter or _active.current
            if active is None or not active.active:
                return func(*args, **kwargs)
            active.step_started(k)
            result = func(*args, **kwargs)
            stalls = active.stalls
            if stalls is not None:
                stalls.dispatched(result)  # when it is ready, the device is idle
            every = sync_every or active.sync_every
            if every and (k + 1 - counter.first_step) % every == 0:
                _block(result)
                active.step_ended(k)
            return result

        wrapper.counter = counter  # type: ignore[attr-defined]
        return wrapper

    return decorate if fn is None else decorate(fn)


@contextlib.contextmanager
def gated_step(adapter: Any, step: int) -> Iterator[None]:
    """``recorder.step(k)`` through the adapter's process gate.

    Start on enter (the dispatch), end on a clean exit. With async dispatch
    the end is when the block returned: block on the result inside it for a
    true end.
    """
    active = _active.get(adapter)
    if active is None:
        yield
        return
    active.step_started(step)
    yield
    active.step_ended(step)
