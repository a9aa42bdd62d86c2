"""Fixtures of the MaxText shim tests: a fake clock, a unique memory store,
MaxText-style config objects, and sys.modules hygiene for the alias."""

from __future__ import annotations

import sys
import types
import uuid

import pytest

from tests.support.fake_clock import FakeClock

from goodput_integrations.maxtext import alias, runtime


_OUR_VARIABLES = ("GOODPUT_STORE", "GOODPUT_ROLLING_WINDOWS", "GOODPUT_PROMETHEUS_PORT",
                  "GOODPUT_IDEAL_STEP_TIME", "GOODPUT_CHECKPOINT_STATS", "GOODPUT_RUN_GROUP",
                  "GOODPUT_SYSTEM_METRICS")


@pytest.fixture(autouse=True)
def isolated_runtime(monkeypatch):
    """No GOODPUT_* variable from the caller's shell; afterwards, the hooks and
    patches a recorder built by the helpers installed are gone."""
    for name in _OUR_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield
    runtime.release()


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def store_url():
    return f"memory://maxtext-tests-{uuid.uuid4().hex}"


@pytest.fixture
def make_config(tmp_path, clock, store_url):
    """Builds a MaxText-style config object (attributes, like pyconfig's)."""

    def make(**overrides):
        flags = dict(
            run_name=f"mt-{uuid.uuid4().hex[:6]}",
            base_output_directory=str(tmp_path / "out"),
            enable_goodput_recording=True,
            monitor_goodput=True,
            goodput_upload_interval_seconds=30,
            enable_pathways_goodput=False,
            monitor_step_time_deviation=True,
            step_deviation_interval_seconds=30,
            # no test talks to Google Cloud
            enable_gcp_goodput_metrics=False,
            enable_gcp_step_deviation_metrics=False,
            enable_checkpoint_cloud_logger=False,
            elastic_enabled=False,
            goodput_store=store_url,
            _goodput_clock=clock,
            _goodput_process_index=0,
        )
        flags.update(overrides)
        return types.SimpleNamespace(**flags)

    return make


_ROOTS = (alias.ROOT, "google_cloud_mldiagnostics")


def _reference_modules():
    return {n: m for n, m in sys.modules.items()
            if any(n == r or n.startswith(r + ".") for r in _ROOTS)}


@pytest.fixture
def clean_reference(monkeypatch):
    """No ml_goodput_measurement (nor google_cloud_mldiagnostics) module is
    imported during the test; whatever was imported before comes back
    afterwards, and the alias is off."""
    before = _reference_modules()
    for name in before:
        monkeypatch.delitem(sys.modules, name)
    yield
    alias.disable_reference_alias()
    for name in list(_reference_modules()):
        del sys.modules[name]
    # monkeypatch restores the modules it deleted
