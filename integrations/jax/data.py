"""Data loading: time the blocking ``next()`` of an input pipeline.

Each batch becomes one ``data_loading`` start/end pair. The calculator decides
whether it blocked the loop (outside step spans: ``DATA_LOADING_SYNC``) or was
overlapped (inside: ``DATA_LOADING_ASYNC``). With asynchronous dispatch a
load inside a step span can still leave the device idle: the adapter
observes when the previous tracked step's outputs became ready and records
that idle part as an ``input_stall`` span, which counts as
``DATA_LOADING_SYNC`` (see :mod:`goodput_integrations.jax.stalls` for how
and for the error bound). ``StopIteration`` is the end of the data, not a
batch, and records nothing; nor does a failed ``next()``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Optional, TypeVar

from goodput_integrations.base.data import TimedIterator, timed_call
from goodput_integrations.jax._active import ACTIVE

__all__ = ["InstrumentedIterator", "instrument_iterator", "timed_load_batch"]

T = TypeVar("T")


class InstrumentedIterator(TimedIterator[T]):
    """An iterator that records how long each ``next()`` blocked.

    Other attributes (``get_state``/``set_state`` of Grain or tf.data
    iterators, for checkpointing) are forwarded to the wrapped iterator.
    """

    __slots__ = ()
    slot = ACTIVE

    @property
    def wrapped(self) -> Any:
        """The iterator being timed."""
        return self._it


def instrument_iterator(it: Iterable[T], adapter: Optional[Any] = None) -> InstrumentedIterator[T]:
    """Wraps a data iterator so that every ``next()`` is a data-loading span.

    Args:
      it: an iterator, or an iterable (``iter()`` is called on it).
      adapter: a specific :class:`JaxAdapter`; default: whichever is
        instrumented at the time of each ``next()`` (none: no recording).

    Returns:
      An iterator yielding the same batches.

    Example::

        batches = instrument_iterator(dataset)
        for batch in batches: ...
    """
    if not hasattr(it, "__next__"):
        it = iter(it)
    return InstrumentedIterator(it, adapter)


def timed_load_batch(fn: Optional[Callable[..., T]] = None, *,
                     adapter: Optional[Any] = None) -> Any:
    """Decorator: each call of a ``load_batch`` function is a data-loading span.

    A call that raises (``StopIteration`` included) records nothing.

    Example::

        @timed_load_batch
        def load_batch(it):
            return next(it)
    """

    def decorate(func: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            active = ACTIVE.get(adapter)
            if active is None:
                return func(*args, **kwargs)
            return timed_call(active, func, *args, **kwargs)  # a raising call records nothing

        return wrapper

    return decorate if fn is None else decorate(fn)
