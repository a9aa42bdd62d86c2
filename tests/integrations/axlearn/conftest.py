"""Fixtures of the AXLearn shim tests: a fake clock, a unique memory store,
and flag lists as AXLearn's launcher would pass them."""

from __future__ import annotations

import uuid

import pytest

from tests.support.fake_clock import FakeClock

RECORDER_TYPE = "--recorder_type=goodput_integrations.axlearn:goodput_suite"


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def store_url():
    return f"memory://axlearn-tests-{uuid.uuid4().hex}"


@pytest.fixture
def run_name():
    return f"ax-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def flags(tmp_path, store_url, run_name):
    """``flags(key=value, ...)``: the command line of one AXLearn job."""

    def make(**spec):
        values = dict(name=run_name, upload_dir=str(tmp_path / "summaries"),
                      upload_interval=30, store=store_url,
                      # no test talks to Google Cloud
                      enable_gcp_goodput_metrics="false",
                      enable_gcp_step_deviation_metrics="false")
        values.update(spec)
        return [RECORDER_TYPE] + [f"--recorder_spec={k}={v}" for k, v in values.items()
                                  if v is not None]

    return make
