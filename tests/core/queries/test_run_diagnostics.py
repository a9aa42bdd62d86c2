"""Run diagnostics without a framework: configs and metadata recorded through
a real recorder and store, metric series and metadata read back by the
Calculator."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import pathlib
import sys
import uuid

import numpy as np
import pytest

from goodput_core import Recorder
from goodput_core.queries.calculator import Calculator
from goodput_core.queries.diagnostics import (
    MetricSeries,
    RunContext,
    jsonable,
    load_config,
    record_config,
    record_run_metadata,
)
from goodput_core.events import EventRecord, Kind as K


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        self.t += 1.0
        return self.t


@pytest.fixture
def rec():
    run, url = f"run-{uuid.uuid4().hex[:8]}", f"memory://diag-{uuid.uuid4().hex}"
    recorder = Recorder(run, url, strict=True, clock=Clock())
    yield recorder, run, url
    recorder.close()


def read(rec):
    recorder, run, url = rec
    assert recorder.flush(10)
    calc = Calculator(run, url, clock=lambda: 1e4)
    calc.refresh()
    return calc


# ---------------------------------------------------------------- configs
def test_record_config_from_a_dict(rec):
    fields = record_config(rec[0], {"lr": 3e-4, "model": {"layers": 32}, "seed": np.int64(7)})
    assert fields == {"configs": {"lr": 3e-4, "model": {"layers": 32}, "seed": 7}}
    assert read(rec).metadata() == fields


def test_record_config_from_json_and_yaml_files(rec, tmp_path):
    j = tmp_path / "cfg.json"
    j.write_text(json.dumps({"batch": 256, "opt": {"name": "adamw"}}))
    record_config(rec[0], j)
    meta = read(rec).metadata()
    assert meta["configs"] == {"batch": 256, "opt": {"name": "adamw"}}
    assert meta["config_path"] == str(j)
    pytest.importorskip("yaml")
    y = tmp_path / "cfg.yml"
    y.write_text("batch: 512\nsteps: [1, 2]\nname: run-a\n")
    record_config(rec[0], str(y))
    meta = read(rec).metadata()  # the later record wins
    assert meta["configs"] == {"batch": 512, "steps": [1, 2], "name": "run-a"}
    assert meta["config_path"] == str(y)


def test_yaml_without_pyyaml_is_a_clear_error(tmp_path, monkeypatch):
    y = tmp_path / "cfg.yaml"
    y.write_text("a: 1\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` now fails
    with pytest.raises(RuntimeError, match="PyYAML"):
        load_config(y)


def test_bad_config_inputs(tmp_path):
    (tmp_path / "c.toml").write_text("a = 1")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match=".json, .yaml or .yml"):
        load_config(tmp_path / "c.toml")
    with pytest.raises(ValueError, match="mapping"):
        load_config(tmp_path / "list.json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_config(tmp_path / "broken.json")
    with pytest.raises(OSError):
        load_config(tmp_path / "missing.json")
    with pytest.raises(TypeError):
        record_config(object(), 42)


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Opt:
    lr: float
    betas: tuple


def test_jsonable_makes_configs_storable():
    value = {1: Color.RED, "opt": Opt(1e-3, (0.9, 0.95)), "p": pathlib.Path("/x/y"),
             "nan": math.nan, "arr": np.arange(3), "f": np.float32(0.5), "s": {3, 1},
             "obj": object}
    out = jsonable(value)
    assert out["1"] == "red" and out["opt"] == {"lr": 1e-3, "betas": [0.9, 0.95]}
    assert out["p"] == "/x/y" and out["nan"] == "nan" and out["arr"] == [0, 1, 2]
    assert out["f"] == 0.5 and out["s"] == [1, 3] and out["obj"] == str(object)
    json.dumps(out, allow_nan=False)


# --------------------------------------------------------- run context
def test_run_context_records_metadata_and_the_job(rec):
    def provider():
        return {"framework": "none", "num_devices": 2}

    def broken():
        raise RuntimeError("no devices")

    with RunContext(rec[0], configs={"lr": 0.1}, providers=[provider, broken],
                    record_job=True, experiment="e1") as ctx:
        rec[0].record_step_start_time(0)
    assert ctx.recorded["num_devices"] == 2 and "configs" in ctx.recorded
    calc = read(rec)
    assert calc.metadata() == {"configs": {"lr": 0.1}, "framework": "none", "num_devices": 2,
                               "experiment": "e1"}
    r = calc.cumulative()
    assert r.lifetime[1] > r.lifetime[0]  # job start and end recorded


def test_run_context_records_a_disruption_on_error(rec):
    with pytest.raises(KeyError):
        with RunContext(rec[0], record_job=True):
            raise KeyError("boom")
    recorder, run, url = rec
    assert recorder.flush(10)
    from goodput_core import open_store

    kinds = [e.kind for e in open_store(url).read(run)[0]]
    assert K.DISRUPTION in kinds and K.JOB_END not in kinds


def test_record_run_metadata_without_fields_records_nothing():
    class Sink:
        calls = 0

        def record_metadata(self, **fields):
            Sink.calls += 1

    assert record_run_metadata(Sink(), [lambda: {}]) == {}
    assert Sink.calls == 0


# ---------------------------------------------------------------- metrics
def test_metric_series_by_name(rec):
    recorder = rec[0]
    for step, loss in enumerate([2.5, 2.1, 1.9]):
        recorder.record_metric("loss", loss, step=step)
        recorder.record_metric("tokens_per_second", 1e15 + step, step=step)
    recorder.record_metric("loss", 1.7)  # no step
    calc = read(rec)
    s = calc.metrics("loss")
    assert isinstance(s, MetricSeries)
    steps, times, values = s
    assert steps.tolist() == [0, 1, 2, -1] and steps.dtype == np.int64
    assert values.tolist() == [2.5, 2.1, 1.9, 1.7]
    assert np.all(np.diff(times) > 0)
    assert calc.metrics("tokens_per_second").values.tolist() == [1e15, 1e15 + 1, 1e15 + 2]
    assert len(calc.metrics("unknown").values) == 0


def test_bad_metric_events_are_counted():
    calc = Calculator(clock=lambda: 10.0)
    calc.add([EventRecord("r", int(K.METRIC), 1.0, 0, {"metric_name": "loss",
                                                          "metric_value": math.nan}),
              EventRecord("r", int(K.METRIC), 2.0, 0, {"metric_value": 1.0}),
              EventRecord("r", int(K.METRIC), 3.0, -4, {"metric_name": "loss",
                                                           "metric_value": 1.0}),
              EventRecord("r", int(K.METRIC), 4.0, 2, {"metric_name": "loss",
                                                          "metric_value": 1.0}),
              EventRecord("r", int(K.METADATA), 5.0, None, None)])
    assert calc.skipped == {"non_finite": 1, "missing_field": 2, "bad_step": 1}
    assert calc.metrics("loss").steps.tolist() == [2]
