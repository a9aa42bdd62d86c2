"""Fixtures of the JAX adapter tests: strict recorders on unique memory stores."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("jax")

from goodput_core import Recorder, open_store  # noqa: E402
from goodput_core.events import to_payload  # noqa: E402


class FakeClock:
    """Advances by ``tick`` seconds at each read: deterministic spans, no sleeps."""

    def __init__(self, start: float = 1_000.0, tick: float = 1.0):
        self.t = start
        self.tick = tick

    def __call__(self) -> float:
        self.t += self.tick
        return self.t


class RecorderFixture:
    """A strict recorder on its own memory store, and a way to read it back."""

    def __init__(self, clock=None, **kwargs):
        self.run = f"run-{uuid.uuid4().hex[:8]}"
        self.url = f"memory://jax-tests-{uuid.uuid4().hex}"
        extra = {"clock": clock} if clock is not None else {}
        self.recorder = Recorder(self.run, self.url, strict=True, **extra, **kwargs)

    def records(self):
        assert self.recorder.flush(10)
        events, _ = open_store(self.url).read(self.run)
        return events

    def payloads(self):
        return [to_payload(e) for e in self.records()]

    def with_key(self, key):
        return [p for p in self.payloads() if key in p]


@pytest.fixture
def fake_clock():
    return FakeClock()


@pytest.fixture
def rec():
    fixture = RecorderFixture()
    yield fixture
    fixture.recorder.close()


@pytest.fixture
def rec_fake_clock(fake_clock):
    fixture = RecorderFixture(clock=fake_clock)
    yield fixture
    fixture.recorder.close()


@pytest.fixture(autouse=True, scope="session")
def _jax_backend_up():
    """The process gate decides who writes once a JAX backend is up, which a
    training program has done by its first batch. Start it for every test
    here rather than rely on an earlier test having done so (in a random
    order, test_jax_data_steps and test_jax_gate failed when they ran first).
    The not-yet-started case runs in subprocesses and with a stand-in bridge."""
    import jax

    jax.devices()


@pytest.fixture(autouse=True)
def _uninstrument_after():
    """No adapter outlives its test (listeners, patches and hooks removed)."""
    yield
    import goodput_integrations.jax as gjax

    gjax.uninstrument()
