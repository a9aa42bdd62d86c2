"""Fixtures of the Orbax adapter tests: strict recorders on unique memory stores."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("jax")
pytest.importorskip("orbax.checkpoint")

from goodput_core import Recorder, open_store  # noqa: E402
from goodput_core.events import to_payload  # noqa: E402


class OrbaxRecorder:
    """A strict recorder on its own memory store, and a way to read it back."""

    def __init__(self):
        self.run = f"run-{uuid.uuid4().hex[:8]}"
        self.url = f"memory://orbax-tests-{uuid.uuid4().hex}"
        self.recorder = Recorder(self.run, self.url, strict=True)

    def payloads(self):
        assert self.recorder.flush(10)
        events, _ = open_store(self.url).read(self.run)
        return [to_payload(e) for e in events]

    def stats(self, event_type=None):
        return [p for p in self.payloads() if "event_type" in p
                and (event_type is None or p["event_type"] == event_type)]


@pytest.fixture(autouse=True, scope="session")
def _jax_backend_up():
    """The adapters' process gate decides who records once a JAX backend is
    up, as it is in a program that checkpoints arrays. Start it here, so no
    test depends on another having done so first (random test order)."""
    import jax

    jax.devices()


@pytest.fixture
def orec():
    fixture = OrbaxRecorder()
    yield fixture
    fixture.recorder.close()


@pytest.fixture(autouse=True)
def _orbax_monitoring_off():
    yield
    import goodput_integrations.orbax as gorbax

    gorbax.uninstrument()
