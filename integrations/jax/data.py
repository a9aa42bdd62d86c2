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
from typing import Any, Callable, Iterable, Iterator, Optional, TypeVar

from goodput_integrations.jax import _active

__all__ = ["InstrumentedIterator", "instrument_iterator", "timed_load_batch"]

T = TypeVar("T")


class InstrumentedIterator(Iterator[T]):
    """An iterator that records how long each ``next()`` blocked.

    Other attributes (``get_state``/``set_state`` of Grain or tf.data
    iterators, for checkpointing) are forwarded to the wrapped iterator.
    """

    __slots__ = ("_it", "_adapter")

    def __init__(self, it: Iterator[T], adapter: Optional[Any] = None):
        self._it = it
        self._adapter = adapter

    def __iter__(self) -> "InstrumentedIterator[T]":
        return self

    def __next__(self) -> T:
        adapter = self._adapter or _active.current
        if adapter is None or not adapter.active:
            return next(self._it)
        t0 = adapter.now()
        token = None if t0 is None else adapter.load_started(t0)
        batch = next(self._it)  # StopIteration and errors propagate, unrecorded
        if t0 is not None:
            adapter.loaded(t0, token)
        return batch

    def __getattr__(self, name: str) -> Any:
        if name in InstrumentedIterator.__slots__:
            raise AttributeError(name)  # during unpickling, before __init__
        return getattr(self._it, name)

    @property
    def wrapped(self) -> Iterator[T]:
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
            active = _active.get(adapter)
            t0 = None if active is None else active.now()
            token = None if t0 is None else active.load_started(t0)
            batch = func(*args, **kwargs)  # a raising call records nothing
            if t0 is not None:
                active.loaded(t0, token)
            return batch

        return wrapper

    return decorate if fn is None else decorate(fn)
