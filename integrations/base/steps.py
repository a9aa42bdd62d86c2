"""Training steps: a wrapper that numbers each call of a step function.

The counter advances on every call, recorded or not, so numbering stays
right when instrumentation is switched on later. While an adapter is
active, each call is its step: ``step_started(k)`` before the function
runs and ``step_returned(k, count, result, sync_every)`` after it returned
(each adapter decides there what the return means: the end of the work on a
synchronous device, a dispatch to observe on an asynchronous one). Where
the return is the end and the process writes, the adapter offers
``fast_steps``: the wrapper records the start and the end through them, two
calls in place of the hooks' chain (a step's hooks run in the cold caches
the step leaves behind, where each frame and attribute costs).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from goodput_core.record.native import module as native_module
from goodput_integrations.base.slot import AdapterSlot

__all__ = ["StepCounter", "counted_steps"]


class StepCounter:
    """The number the next call of a tracked step function records.

    Set ``next_step`` after restoring a checkpoint to resume the numbering.
    """

    __slots__ = ("next_step", "first_step")

    def __init__(self, first_step: int):
        self.first_step = self.next_step = int(first_step)


def counted_steps(func: Callable, *, first_step: int, sync_every: Any,
                  adapter: Optional[Any], slot: AdapterSlot, compiled: bool = False) -> Callable:
    """``func`` wrapped so that each call is the next step of ``adapter``
    (default: the slot's current one); the wrapper exposes ``.counter`` (a
    :class:`StepCounter`) and ``__wrapped__``. ``compiled``: where the
    compiled loop calls are built (goodput_core.record.native), the wrapper
    is their ``Steps``: it records through the adapter's ``native_loop``
    without a Python frame, and calls the Python wrapper otherwise."""
    native = native_module() if compiled else None
    counter = StepCounter(first_step) if native is None else native.Counter(first_step)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        k = counter.next_step
        counter.next_step = k + 1
        active = adapter or slot.current
        if active is None or not active.active:
            return func(*args, **kwargs)
        fast = active.fast_steps
        if fast is not None:  # the return is the end: two calls (quality P15)
            try:
                fast[0](k)
            except Exception:
                active._log_once(active._LOG + "step-start", "goodput: recording a step "
                                 "start failed")
            result = func(*args, **kwargs)
            try:
                fast[1](k, k + 1 - counter.first_step, sync_every)
            except Exception:
                active._log_once(active._LOG + "step-end", "goodput: recording a step end "
                                 "failed")
            return result
        active.step_started(k)
        result = func(*args, **kwargs)
        active.step_returned(k, k + 1 - counter.first_step, result, sync_every)
        return result

    wrapper.counter = counter  # type: ignore[attr-defined]
    if native is None:
        return wrapper
    steps = native.Steps(slow=wrapper, func=func, counter=counter, adapter=adapter, slot=slot,
                         sync_every=sync_every)
    functools.update_wrapper(steps, func)
    steps.counter = counter
    return steps
