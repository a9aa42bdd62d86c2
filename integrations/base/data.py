"""Data loading: the blocking ``next()`` of an input pipeline, timed through the adapter.

Each timed call asks the adapter for a token when the load starts
(``load_started(t0)``: on an accelerator, whether the device still runs the
last step) and hands both back when the batch is there (``loaded(t0,
token)``): the adapter records the load and the input stall inside it.
``StopIteration`` is the end of the data, not a batch, and records nothing;
nor does a call that raised.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, TypeVar

from goodput_core.record.native import module as native_module
from goodput_integrations.base.slot import AdapterSlot

__all__ = ["TimedIterator", "timed_call"]

T = TypeVar("T")


def timed_call(adapter: Any, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` recorded as one load through the active ``adapter``."""
    t0 = adapter.now()
    token = None if t0 is None else adapter.load_started(t0)
    result = fn(*args, **kwargs)  # a raising call records nothing
    if t0 is not None:
        adapter.loaded(t0, token)
    return result


class TimedIterator(Iterator[T]):
    """An iterator that records how long each ``next()`` blocked.

    Subclasses name their framework's :class:`AdapterSlot` (``slot``): without
    a bound adapter, each ``next()`` records through the slot's current one.
    Other attributes (``get_state``/``set_state`` of Grain or tf.data
    iterators, for checkpointing) are forwarded to the wrapped iterator.
    """

    __slots__ = ("_it", "_adapter")
    slot: AdapterSlot

    def __init__(self, it: Iterator[T], adapter: Optional[Any] = None):
        self._it = it
        self._adapter = adapter

    def __iter__(self) -> "TimedIterator[T]":
        return self

    def __next__(self) -> T:
        adapter = self._adapter or self.slot.current
        if adapter is None or not adapter.active:
            return next(self._it)
        fast = adapter.fast_load
        if fast is not None:  # the whole load is a stall, handed on by one call (P15)
            try:
                t0 = fast[0]()
            except Exception:
                return next(self._it)
            batch = next(self._it)
            try:
                fast[1](t0)
            except Exception:
                adapter._log_once(adapter._LOG + "stall", "goodput: recording a load failed")
            return batch
        t0 = adapter.now()
        token = None if t0 is None else adapter.load_started(t0)
        batch = next(self._it)  # StopIteration and errors propagate, unrecorded
        if t0 is not None:
            adapter.loaded(t0, token)
        return batch

    def __getattr__(self, name: str) -> Any:
        if name in TimedIterator.__slots__:
            raise AttributeError(name)  # during unpickling, before __init__
        return getattr(self._it, name)

    def compiled(self) -> Iterator[T]:
        """The same iterator, each ``next()`` timed without a Python frame where
        the compiled loop calls are built (goodput_core.record.native's
        ``Loads``: through the adapter's ``native_loop``, else through this
        one); else this one. Attributes are forwarded as here."""
        native = native_module()
        if native is None:
            return self
        return native.Loads(it=self._it, slow=self, adapter=self._adapter, slot=self.slot)
