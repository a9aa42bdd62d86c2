"""Accelerator-init timing (``goodput_integrations.jax.accel``) in-process.

JAX's backends initialise once per process, so the real first init is
tested in fresh processes (``test_jax_subprocess.py``). Here the private
``xla_bridge`` module is a stand-in with the two names the timer uses
(``backends()`` and the ``_backends`` dict it fills, read by the real
``_probe.backends_initialized``), so every branch runs in this process:
first init, already initialised, initialised behind the timer's back, an
inactive adapter, a failing record, and ``jax.distributed.initialize``.
Events go to a real recorder and store.
"""

from __future__ import annotations

import logging
import types

import jax.distributed
import pytest

from goodput_integrations.jax import _probe
from goodput_integrations.jax.accel import AcceleratorInitTimer


class Adapter:
    """What the timer needs of the JAX adapter: a recorder, a clock, ``emit``."""

    def __init__(self, recorder, clock, active=True):
        self.recorder, self.clock, self.active = recorder, clock, active
        self.ready_calls = 0
        self.fail_emit = False

    def emit(self, fn, *args):
        if self.fail_emit:
            raise RuntimeError("recorder gone")
        fn(*args)

    def on_backends_ready(self):
        self.ready_calls += 1


@pytest.fixture
def xb(monkeypatch):
    """A stand-in xla_bridge whose ``backends()`` initialises like JAX's."""
    bridge = types.SimpleNamespace(_backends={}, init_calls=0)

    def backends():
        bridge.init_calls += 1
        bridge._backends.setdefault("cpu", object())
        return bridge._backends

    bridge.backends = backends
    monkeypatch.setattr(_probe, "xla_bridge", lambda: bridge)
    monkeypatch.setattr(_probe, "_logged", set())  # every log_once logs again
    return bridge


@pytest.fixture
def no_distributed(monkeypatch):
    """jax.distributed.initialize replaced by a stub that records its calls."""
    calls = []

    def initialize(*args, **kwargs):
        """The stub's docstring."""
        calls.append((args, kwargs))
        return "initialised"

    monkeypatch.setattr(jax.distributed, "initialize", initialize)
    return initialize, calls


def _init_spans(rec):
    payloads = rec.payloads()
    starts = [p["tpu_init_start_time"] for p in payloads if "tpu_init_start_time" in p]
    ends = [p["tpu_init_end_time"] for p in payloads if "tpu_init_end_time" in p]
    return list(zip(starts, ends))


def test_the_first_backend_init_is_timed_once_then_unpatched(xb, no_distributed,
                                                             rec_fake_clock, fake_clock):
    adapter = Adapter(rec_fake_clock.recorder, fake_clock)
    original = xb.backends
    timer = AcceleratorInitTimer(adapter)
    timer.install()
    assert not timer.too_late and xb.backends is not original
    wrapper = xb.backends
    assert wrapper.__wrapped__ is original
    assert wrapper() == {"cpu": xb._backends["cpu"]}
    # the fake clock ticks 1 s per read: read before (1001) and after (1002)
    assert _init_spans(rec_fake_clock) == [(1001.0, 1002.0)]
    assert xb.backends is original and adapter.ready_calls == 1
    wrapper()  # a caller that kept the wrapper: passes through, nothing recorded
    assert xb.init_calls == 2 and len(_init_spans(rec_fake_clock)) == 1
    assert adapter.ready_calls == 1
    timer.uninstall()


def test_backends_already_up_at_install_is_too_late(xb, no_distributed, rec, fake_clock):
    xb._backends["cpu"] = object()
    original = xb.backends
    timer = AcceleratorInitTimer(Adapter(rec.recorder, fake_clock))
    timer.install()
    assert timer.too_late and xb.backends is original
    timer.uninstall()


def test_an_init_behind_the_timers_back_is_not_timed(xb, no_distributed, rec, fake_clock):
    adapter = Adapter(rec.recorder, fake_clock)
    original = xb.backends
    timer = AcceleratorInitTimer(adapter)
    timer.install()
    xb._backends["tpu"] = object()  # initialised by a path that bypassed backends()
    xb.backends()
    assert _init_spans(rec) == []
    assert adapter.ready_calls == 1 and xb.backends is original


def test_an_inactive_adapter_passes_through_until_active(xb, no_distributed, rec_fake_clock,
                                                         fake_clock):
    adapter = Adapter(rec_fake_clock.recorder, fake_clock, active=False)
    timer = AcceleratorInitTimer(adapter)
    timer.install()
    wrapper = xb.backends
    wrapper()
    assert _init_spans(rec_fake_clock) == [] and xb.backends is wrapper
    xb._backends.clear()  # (the stand-in can initialise again)
    adapter.active = True
    wrapper()
    assert _init_spans(rec_fake_clock) == [(1001.0, 1002.0)]
    timer.uninstall()


def test_a_failing_record_is_logged_not_raised(xb, no_distributed, rec, fake_clock, caplog):
    adapter = Adapter(rec.recorder, fake_clock)
    adapter.fail_emit = True
    timer = AcceleratorInitTimer(adapter)
    timer.install()
    caplog.set_level(logging.WARNING, logger="goodput")
    assert xb.backends() == xb._backends  # the training program is not disturbed
    assert "recording accelerator init failed" in caplog.text
    assert adapter.ready_calls == 0  # emit raised first


def test_uninstall_leaves_a_later_patch_alone(xb, no_distributed, rec, fake_clock):
    initialize, _ = no_distributed
    timer = AcceleratorInitTimer(Adapter(rec.recorder, fake_clock))
    timer.install()

    def theirs():
        return {}

    xb.backends = theirs  # somebody wrapped backends after us
    timer.uninstall()
    assert xb.backends is theirs
    assert jax.distributed.initialize is initialize  # ours was put back


def test_without_the_private_bridge_only_distributed_is_timed(monkeypatch, no_distributed,
                                                              rec_fake_clock, fake_clock):
    monkeypatch.setattr(_probe, "xla_bridge", lambda: None)
    initialize, calls = no_distributed
    timer = AcceleratorInitTimer(Adapter(rec_fake_clock.recorder, fake_clock))
    timer.install()
    assert not timer.too_late  # cannot tell: nothing claimed
    assert jax.distributed.initialize is not initialize
    timer.uninstall()
    assert jax.distributed.initialize is initialize


def test_distributed_initialize_is_timed_each_call(xb, no_distributed, rec_fake_clock,
                                                   fake_clock):
    initialize, calls = no_distributed
    adapter = Adapter(rec_fake_clock.recorder, fake_clock)
    timer = AcceleratorInitTimer(adapter)
    timer.install()
    timer.install()  # idempotent: one wrapper
    wrapped = jax.distributed.initialize
    assert wrapped.__wrapped__ is initialize and wrapped.__doc__ == "The stub's docstring."
    assert wrapped("coord:1234", num_processes=2) == "initialised"
    assert calls == [(("coord:1234",), {"num_processes": 2})]
    assert _init_spans(rec_fake_clock) == [(1001.0, 1002.0)]
    adapter.active = False
    assert wrapped() == "initialised"  # inactive: passes through, nothing recorded
    assert len(_init_spans(rec_fake_clock)) == 1
    adapter.active, adapter.fail_emit = True, True
    assert wrapped() == "initialised"  # a failing record does not fail the init
    timer.uninstall()
    assert jax.distributed.initialize is initialize


def test_a_non_callable_distributed_initialize_is_left_alone(xb, monkeypatch, rec, fake_clock):
    monkeypatch.setattr(jax.distributed, "initialize", None)
    timer = AcceleratorInitTimer(Adapter(rec.recorder, fake_clock))
    timer.install()
    assert jax.distributed.initialize is None
    timer.uninstall()
