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

from goodput_integrations.base.data import TimedIterator, timed_call
from goodput_integrations.torch._active import ACTIVE

__all__ = ["InstrumentedLoader", "LoaderIterator", "instrument_loader"]


class LoaderIterator(TimedIterator[Any]):
    """An iterator that records how long each ``next()`` blocked."""

    __slots__ = ()
    slot = ACTIVE


class InstrumentedLoader:
    """An iterable over a loader whose iterators time each ``next()``.

    Attributes of the loader (``dataset``, ``sampler``, ``batch_size``...)
    are forwarded; ``wrapped`` is the loader itself.
    """

    def __init__(self, loader: Iterable[Any], adapter: Optional[Any] = None):
        self.wrapped = loader
        self._adapter = adapter

    def __iter__(self) -> Iterator[Any]:
        adapter = ACTIVE.get(self._adapter)
        if adapter is None:
            return LoaderIterator(iter(self.wrapped), self._adapter).compiled()
        it = timed_call(adapter, iter, self.wrapped)  # worker start-up: the loop waits for it
        return LoaderIterator(it, self._adapter).compiled()

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
