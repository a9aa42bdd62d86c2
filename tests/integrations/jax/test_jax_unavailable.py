"""Without jax: importing is fine, asking for the adapter raises AdapterUnavailable."""

from __future__ import annotations

import sys

import pytest

import goodput_integrations.jax as gjax
from goodput_integrations import AdapterUnavailable


def test_asking_for_the_adapter_without_jax_raises(monkeypatch, rec):
    monkeypatch.setitem(sys.modules, "jax", None)  # `import jax` now fails
    with pytest.raises(AdapterUnavailable):
        gjax.JaxAdapter(rec.recorder)
    with pytest.raises(AdapterUnavailable):
        gjax.instrument(rec.recorder)
    assert gjax.active_adapter() is None


def test_adapter_unavailable_is_an_import_error():
    assert issubclass(AdapterUnavailable, ImportError)
