"""The PyTorch adapter (``goodput_integrations.torch``).

Turn it on around the whole job::

    from goodput_integrations import torch as gtorch

    with rec.job(), gtorch.instrumented(rec):
        dist.init_process_group("gloo")                   # accelerator init
        model = torch.compile(model)                      # compiles: program startup
        loader = gtorch.instrument_loader(DataLoader(ds, num_workers=2))
        train_step = gtorch.train_step(step_fn, first_step=start_step)
        for x, y in loader:
            train_step(x, y)
            if step % 100 == 0:
                dcp.save(state, checkpoint_id=f"{ckpt}/{step}")   # checkpoint save

What it records: accelerator init (``init_process_group``, the first CUDA
init), every ``torch.compile`` compilation and recompilation (program
startup, from TorchDynamo's compile callbacks), loads and the input stalls
inside them, steps (timed from completed work: see :mod:`.steps`),
``torch.distributed.checkpoint`` save/load (the blocking part of
``async_save``), ``sigterm`` and ``exception:<Type>`` disruptions, and run
metadata (versions, device kind and count, world size, torchrun facts).
Lightning and the Hugging Face Trainer: :mod:`.lightning` and :mod:`.hf`.

Importing this module does not import torch; asking for the adapter
without torch raises :class:`AdapterUnavailable`.
"""

from __future__ import annotations

from typing import Any, ContextManager, Optional

from goodput_integrations.errors import AdapterUnavailable
from goodput_integrations.jax.signals import DISRUPTION_RECORDED_ATTR
from goodput_integrations.torch._active import ACTIVE
from goodput_integrations.torch.adapter import DEFAULT_CUDA_SYNC_EVERY, TorchAdapter
from goodput_integrations.torch.checkpoints import load, save
from goodput_integrations.torch.data import InstrumentedLoader, instrument_loader
from goodput_integrations.torch.elastic import elastic_run_name, is_rank_zero
from goodput_integrations.torch.metadata import run_metadata
from goodput_integrations.torch.steps import StepCounter, track_steps

__all__ = [
    "AdapterUnavailable",
    "DEFAULT_CUDA_SYNC_EVERY",
    "DISRUPTION_RECORDED_ATTR",
    "InstrumentedLoader",
    "StepCounter",
    "TorchAdapter",
    "active_adapter",
    "elastic_run_name",
    "instrument",
    "instrument_loader",
    "instrumented",
    "is_rank_zero",
    "load",
    "run_metadata",
    "save",
    "train_step",
    "uninstrument",
]

# ``gtorch.train_step(fn, first_step=k)`` or ``@gtorch.train_step``.
train_step = track_steps


def instrument(recorder: Any, **options: Any) -> TorchAdapter:
    """Instruments PyTorch for ``recorder`` (idempotent for the same recorder and options).

    A different recorder or different options replace the current adapter.

    Args:
      recorder: a :class:`goodput_core.Recorder`.
      **options: :class:`TorchAdapter` keyword options (``per_host``,
        ``sync_every``, ...).

    Returns:
      The active :class:`TorchAdapter`.

    Raises:
      AdapterUnavailable: torch is not installed.
    """
    return ACTIVE.instrument(TorchAdapter, recorder, options)


def uninstrument() -> None:
    """Turns the current adapter off (no-op when none is on)."""
    ACTIVE.uninstrument()


def instrumented(recorder: Any, **options: Any) -> ContextManager[TorchAdapter]:
    """Context manager: instrumented inside the block, uninstrumented after.

    Example::

        with rec.job(), gtorch.instrumented(rec, per_host=True):
            train()
    """
    return ACTIVE.instrumented(TorchAdapter, recorder, options)


def active_adapter() -> Optional[TorchAdapter]:
    """The adapter module-level wrappers currently record through, or None."""
    return ACTIVE.get()
