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


def test_importing_the_adapter_package_imports_no_framework():
    """docs/jax.md: importing goodput_integrations.jax does not import jax (a fresh
    interpreter: this one has jax loaded by other tests)."""
    import subprocess

    code = ("import sys, goodput_integrations.jax, goodput_integrations.orbax; "
            "print(sorted(m for m in ('jax', 'jaxlib', 'flax', 'orbax', 'optax') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "[]"
