"""The PyTorch adapter that module-level wrappers use, looked up at call time."""

from __future__ import annotations

from goodput_integrations.base.slot import AdapterSlot

#: ``ACTIVE.current``: the most recently instrumented TorchAdapter, or None.
ACTIVE = AdapterSlot()
