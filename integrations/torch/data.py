"""Data loading: time the blocking ``next()`` of a ``DataLoader`` (or any iterable).

``instrument_loader(loader)`` returns an iterable that yields the same
batches: every ``iter()`` of it (each epoch) iterates the loader and times
each ``next()``, and ``iter()`` itself (with ``num_workers > 0`` and no
persistent workers it starts the worker processes: the loop waits for
that too). Each timed call is a ``data_loading`` span, and the part of it
during which the device was idle is an ``input_stall`` span, counted as
``DATA_LOADING_SYNC`` wherever it lies (semantics rules 7 and 16):

* on the CPU the whole call: the compute of a synchronous loop waits for it;
* on CUDA the part after the GPU finished the previous tracked step
  (observed with CUDA events, :mod:`goodput_integrations.torch.stalls`):
  while the GPU still runs the last step, the load is overlapped.

``len()``, ``sampler``, ``dataset``, ``batch_size`` and every other attribute
are the loader's. ``StopIteration`` is the end of the epoch, not a batch,
and a failed ``next()`` records nothing.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional

from goodput_integrations.torch import _active

__all__ = ["InstrumentedLoader", "LoaderIterator", "instrument_loader"]


class LoaderIterator(Iterator[Any]):
    """An iterator that records how long each ``next()`` blocked."""

    __slots__ = ("_it", "_adapter")

    def __init__(self, it: Iterator[Any], adapter: Optional[Any] = None):
        self._it = it
        self._adapter = adapter

    def __iter__(self) -> "LoaderIterator":
        return self

    def __next__(self) -> Any:
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
        if name in LoaderIterator.__slots__:
            raise AttributeError(name)  # during unpickling, before __init__
        return getattr(self._it, name)


class InstrumentedLoader:
    """An iterable over a loader whose iterators time each ``next()``.

    Attributes of the loader (``dataset``, ``sampler``, ``batch_size``...)
    are forwarded; ``wrapped`` is the loader itself.
    """

    def __init__(self, loader: Iterable[Any], adapter: Optional[Any] = None):
        self.wrapped = loader
        self._adapter = adapter

    def __iter__(self) -> LoaderIterator:
        adapter = _active.get(self._adapter)
        if adapter is None:
            return LoaderIterator(iter(self.wrapped), self._adapter)
        t0 = adapter.now()
        token = None if t0 is None else adapter.load_started(t0)
        it = iter(self.wrapped)  # worker start-up: the loop waits for it
        if t0 is not None:
            adapter.loaded(t0, token)
        return LoaderIterator(it, self._adapter)

    def __len__(self) -> int:
        return len(self.wrapped)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        if name in ("wrapped", "_adapter"):
            raise AttributeError(name)
        return getattr(self.wrapped, name)


def instrument_loader(loader: Iterable[Any], adapter: Optional[Any] = None) -> InstrumentedLoader:
    """Wraps a ``DataLoader`` (or any iterable) so that its loads are recorded.

    Args:
      loader: the loader; an iterator works too (it is its own ``iter()``).
      adapter: a specific :class:`TorchAdapter`; default: whichever is
        instrumented at the time of each call (none: nothing is recorded).

    Returns:
      An iterable yielding the same batches, epoch after epoch.

    Example::

        loader = gtorch.instrument_loader(DataLoader(ds, batch_size=64, num_workers=2))
        for epoch in range(epochs):
            for x, y in loader:
                train_step(x, y)
    """
    return InstrumentedLoader(loader, adapter)
