"""Suite-wide pytest configuration.

Almost empty: with ``tests/__init__.py`` present, pytest imports
this file as ``tests.conftest`` and puts the repository root on ``sys.path``,
so test modules can ``import tests.support...`` under a plain ``pytest`` run
as well as under ``python -m pytest``.
"""

import sys

import pytest


@pytest.fixture(autouse=True)
def _release_maxtext_runtime():
    """A MaxText recorder built by any test (``create_goodput_recorder``) arms
    process-wide hooks (Orbax patch, compile listeners, SIGTERM handler,
    excepthook): removed after each test so none leaks into the next."""
    yield
    runtime = sys.modules.get("goodput_integrations.maxtext.runtime")
    if runtime is not None:
        runtime.release()
