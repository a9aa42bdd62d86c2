"""With AXLearn importable, our recorder is an AXLearn recorder in AXLearn's registry.

AXLearn itself is too heavy to install here: a tiny fake ``axlearn`` package
(the contract spec/integrations.md describes: ``Configurable`` base with a
``Config`` holding ``name``, ``register_recorder`` refusing duplicates,
``Event``/``EventType``, and ``initialize(fv)`` that imports ``module`` and
calls ``from_flags(fv=fv)``) is written to a temporary directory for the test.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import types

import pytest

from goodput_core import open_store
from goodput_core.events import to_payload

FAKE_MEASUREMENT = textwrap.dedent('''
    """Fake axlearn.common.measurement (test double of AXLearn's contract)."""
    import contextlib
    import copy
    import enum
    import importlib

    class Configurable:
        class Config:
            def __init__(self, klass):
                self.klass = klass
                self.name = None  # REQUIRED in AXLearn

            def set(self, **kwargs):
                for key, value in kwargs.items():
                    setattr(self, key, value)
                return self

            def instantiate(self, **kwargs):
                return self.klass(self, **kwargs)

        @classmethod
        def default_config(cls):
            return cls.Config(klass=cls)

        def __init__(self, cfg):
            if cfg is None or cfg.name is None:
                raise ValueError("name is required")
            self._config = copy.deepcopy(cfg)

        @property
        def config(self):
            return copy.deepcopy(self._config)

    class Event(enum.Enum):
        START_JOB = "START_JOB"
        END_JOB = "END_JOB"
        START_STEP = "START_STEP"
        START_ACCELERATOR_INIT = "START_ACCELERATOR_INIT"
        END_ACCELERATOR_INIT = "END_ACCELERATOR_INIT"
        START_TRAINING_PREPARATION = "START_TRAINING_PREPARATION"
        END_TRAINING_PREPARATION = "END_TRAINING_PREPARATION"
        START_DATA_LOADING = "START_DATA_LOADING"
        END_DATA_LOADING = "END_DATA_LOADING"
        START_CUSTOM_BADPUT_EVENT = "START_CUSTOM_BADPUT_EVENT"
        END_CUSTOM_BADPUT_EVENT = "END_CUSTOM_BADPUT_EVENT"

    class EventType(enum.Enum):
        JOB = "job"
        STEP = "step"
        ACCELERATOR_INIT = "tpu_init"
        TRAINING_PREPARATION = "training_preparation"
        DATA_LOADING = "data_loading"
        CUSTOM_BADPUT_EVENT = "custom_badput_event"

    class Recorder(Configurable):
        @classmethod
        def from_flags(cls, fv):
            raise NotImplementedError(cls)

        def record(self, event, *args, **kwargs):
            raise NotImplementedError(type(self))

        def start_monitoring(self, **kwargs):
            raise NotImplementedError(type(self))

        @contextlib.contextmanager
        def record_event(self, event, *args, **kwargs):
            yield

        @contextlib.contextmanager
        def maybe_monitor_all(self):
            yield

    _recorders = {}

    def register_recorder(name):
        def fn(cls):
            if name in _recorders:
                raise ValueError(f"Recorder {name} is already registered.")
            _recorders[name] = cls
            return cls
        return fn

    global_recorder = None

    def initialize(fv):
        global global_recorder
        parts = fv.recorder_type.split(":", 1)
        if len(parts) > 1:
            importlib.import_module(parts[0])
        recorder_class = _recorders.get(parts[-1])
        if recorder_class is None:
            raise NotImplementedError(fv.recorder_type)
        global_recorder = recorder_class.from_flags(fv=fv)

    def record_event(event):
        global_recorder.record(event)

    def start_monitoring():
        global_recorder.start_monitoring()
''')

OURS = "goodput_integrations.axlearn"


@pytest.fixture
def fake_axlearn(tmp_path, monkeypatch):
    """Puts the fake AXLearn on sys.path and re-imports our package against it;
    restores every module (ours and the fake) afterwards."""
    root = tmp_path / "site"
    (root / "axlearn" / "common").mkdir(parents=True)
    (root / "axlearn" / "__init__.py").write_text("")
    (root / "axlearn" / "common" / "__init__.py").write_text("")
    (root / "axlearn" / "common" / "measurement.py").write_text(FAKE_MEASUREMENT)
    saved = {n: m for n, m in sys.modules.items()
             if n == "axlearn" or n.startswith("axlearn.") or n == OURS
             or n.startswith(OURS + ".")}
    parent = importlib.import_module("goodput_integrations")
    monkeypatch.setattr(parent, "axlearn", getattr(parent, "axlearn", None), raising=False)
    for name in saved:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(root))
    yield importlib.import_module("axlearn.common.measurement")
    for name in [n for n in sys.modules if n == "axlearn" or n.startswith("axlearn.")
                 or n == OURS or n.startswith(OURS + ".")]:
        del sys.modules[name]
    # monkeypatch puts the original modules and sys.path back


def test_registers_with_axlearn_and_runs_through_its_initialize(
        fake_axlearn, tmp_path, monkeypatch):
    measurement = fake_axlearn
    gax = importlib.import_module(OURS)
    assert gax.AXLEARN_AVAILABLE
    cls = gax.GoodputSuiteRecorder
    assert measurement._recorders["goodput_suite"] is cls
    assert issubclass(cls, measurement.Recorder)
    assert gax.Event is measurement.Event and gax.EventType is measurement.EventType

    clock = types.SimpleNamespace(t=500.0)
    monkeypatch.setattr(cls, "_hook_clock", lambda: clock.t)
    monkeypatch.setattr(cls, "_hook_process_index", 0)
    url = f"memory://fake-axlearn-{id(tmp_path)}"
    fv = types.SimpleNamespace(
        recorder_type=f"{OURS}:goodput_suite",
        recorder_spec=["name=reg-run", f"store={url}", "enable_monitoring=false"])
    measurement.initialize(fv)  # AXLearn's own path: import, registry, from_flags(fv=)
    rec = measurement.global_recorder
    assert isinstance(rec, cls) and rec.config.name == "reg-run"
    measurement.start_monitoring()
    with rec.maybe_monitor_all():
        measurement.record_event(measurement.Event.START_JOB)
        with rec.record_event(measurement.EventType.STEP, 0):
            clock.t += 2
        measurement.record_event(measurement.Event.END_JOB)
    assert rec.flush(10)
    keys = [next(k for k in to_payload(e) if k.endswith("_time"))
            for e in open_store(url).read("reg-run")[0]]
    assert keys == ["job_start_time", "step_start_time", "step_end_time", "job_end_time"]


def test_a_second_import_of_our_module_does_not_trip_the_duplicate_check(fake_axlearn):
    measurement = fake_axlearn
    first = importlib.import_module(OURS + ".recorder")
    del sys.modules[OURS + ".recorder"]
    second = importlib.import_module(OURS + ".recorder")
    assert first.GoodputSuiteRecorder is not second.GoodputSuiteRecorder
    assert measurement._recorders["goodput_suite"] is second.GoodputSuiteRecorder


def test_someone_elses_recorder_under_our_name_is_an_error(fake_axlearn):
    measurement = fake_axlearn
    measurement.register_recorder("goodput_suite")(type("Other", (measurement.Recorder,), {}))
    with pytest.raises(ValueError, match="already registered"):
        importlib.import_module(OURS)


def test_without_axlearn_it_is_a_plain_class():
    import goodput_integrations.axlearn as gax

    if gax.AXLEARN_AVAILABLE:  # pragma: no cover - AXLearn really installed
        pytest.skip("AXLearn is installed")
    assert gax.GoodputSuiteRecorder.__mro__[1].__name__ == "_PlainRecorder"
    assert [e.value for e in gax.EventType][2] == "tpu_init"


def test_built_through_axlearns_config_system(fake_axlearn, tmp_path):
    """A Python config, as AXLearn users write one: the upstream recorder's
    fields (and ours) mean what the --recorder_spec keys mean."""
    gax = importlib.import_module(OURS)
    cfg = gax.GoodputSuiteRecorder.default_config().set(
        name="cfg-run", upload_dir=str(tmp_path / "tb"), upload_interval=0,
        rolling_window_size=[3600, 86400], jax_backend="proxy", enable_monitoring=True,
        store="memory://cfg-run", per_host=True)
    rec = cfg.instantiate()
    assert rec.config.name == "cfg-run"
    spec = rec.spec
    assert (spec.name, spec.upload_dir, spec.upload_interval) == ("cfg-run",
                                                                 str(tmp_path / "tb"), 0)
    assert spec.rolling_window_size == (3600, 86400) and spec.pathways
    assert spec.enable_monitoring and spec.per_host and spec.store == "memory://cfg-run"
    # a name alone: AXLearn's recorder requires upload_dir; so do we (not a silent run)
    with pytest.raises(ValueError, match="upload_dir"):
        gax.GoodputSuiteRecorder.default_config().set(name="cfg-run").instantiate()
    off = gax.GoodputSuiteRecorder.default_config().set(name="cfg-run",
                                                        enable_monitoring=False)
    assert off.instantiate().spec.enable_monitoring is False
    # from_flags fills the same fields of the recorder's config
    flagged = gax.GoodputSuiteRecorder.from_flags(["name=f", "upload_dir=/o",
                                                   "upload_interval=15"])
    assert (flagged.config.upload_dir, flagged.config.upload_interval) == ("/o", 15)
