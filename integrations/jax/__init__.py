"""The JAX adapter (``goodput_integrations.jax``).

Turn it on in one line, around the whole job::

    from goodput_integrations import jax as gjax

    gjax.instrument(recorder)              # or: with gjax.instrumented(recorder): ...
    for batch in gjax.instrument_iterator(dataset):   # data-loading spans
        state = train_step(state, batch)   # decorated with @gjax.train_step

What it records: accelerator init (``tpu_init``), every compile
(``program_startup`` spans from ``jax.monitoring``; re-compilations too),
data loading around ``next()`` and the input stalls inside it (the part
with the device idle, see :mod:`goodput_integrations.jax.stalls`), steps
(start = dispatch), ``sigterm`` and
``exception:<Type>`` disruptions, run metadata (versions, devices) and, on
request, FLOPs per step. Importing this module does not import jax; asking
for the adapter without jax raises :class:`AdapterUnavailable`.
"""

from __future__ import annotations

from typing import Any, ContextManager, Optional

from goodput_integrations.errors import AdapterUnavailable
from goodput_integrations.jax._active import ACTIVE
from goodput_integrations.jax.adapter import JaxAdapter
from goodput_integrations.jax.data import (
    InstrumentedIterator,
    instrument_iterator,
    timed_load_batch,
)
from goodput_integrations.jax.metadata import (
    flops_per_step,
    peak_flops_per_device,
    record_flops,
    run_metadata,
)
from goodput_integrations.jax.signals import DISRUPTION_RECORDED_ATTR
from goodput_integrations.jax.steps import StepCounter, track_steps

__all__ = [
    "AdapterUnavailable",
    "DISRUPTION_RECORDED_ATTR",
    "InstrumentedIterator",
    "JaxAdapter",
    "StepCounter",
    "active_adapter",
    "flops_per_step",
    "instrument",
    "instrument_iterator",
    "instrumented",
    "peak_flops_per_device",
    "record_flops",
    "run_metadata",
    "timed_load_batch",
    "track_steps",
    "train_step",
    "uninstrument",
]

# ``@train_step`` / ``@train_step(first_step=k, sync_every=n)``.
train_step = track_steps


def instrument(recorder: Any, **options: Any) -> JaxAdapter:
    """Instruments JAX for ``recorder`` (idempotent for the same recorder and options).

    A different recorder or different options replace the current adapter.

    Args:
      recorder: a :class:`goodput_core.Recorder`.
      **options: :class:`JaxAdapter` keyword options (``per_host``, ``sync_every``, ...).

    Returns:
      The active :class:`JaxAdapter`.

    Raises:
      AdapterUnavailable: jax is not installed.
    """
    return ACTIVE.instrument(JaxAdapter, recorder, options)


def uninstrument() -> None:
    """Turns the current adapter off (no-op when none is on)."""
    ACTIVE.uninstrument()


def instrumented(recorder: Any, **options: Any) -> ContextManager[JaxAdapter]:
    """Context manager: instrumented inside the block, uninstrumented after.

    Example::

        with gjax.instrumented(recorder, sync_every=100) as adapter:
            train()
    """
    return ACTIVE.instrumented(JaxAdapter, recorder, options)


def active_adapter() -> Optional[JaxAdapter]:
    """The adapter module-level wrappers currently record through, or None."""
    return ACTIVE.get()
