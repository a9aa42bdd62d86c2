"""The exporter registry: every exporter kind in one place, each rebuilt in a
monitor process from its spec, and nothing else built from a spec."""

import ast
import os

import pytest

from goodput_core.exporters import registry
from goodput_core.exporters.base import Exporter
from goodput_core.exporters.console import ConsoleExporter
from goodput_core.exporters.lazy import LazyExporter
from goodput_core.exporters.tensorboard import TensorBoardExporter

EXPORTERS_DIR = os.path.dirname(registry.__file__)


def _modules_defining_an_exporter():
    """Modules of goodput_core/exporters/ with a class deriving from Exporter."""
    found = set()
    for name in sorted(os.listdir(EXPORTERS_DIR)):
        if not name.endswith(".py") or name in ("base.py", "lazy.py"):
            continue
        with open(os.path.join(EXPORTERS_DIR, name), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        if any(isinstance(n, ast.ClassDef) and any(getattr(b, "id", None) == "Exporter"
                                                   for b in n.bases) for n in tree.body):
            found.add(name[:-3])
    return found


def test_every_exporter_module_is_registered_and_every_target_resolves():
    registered = {k.target.partition(":")[0] for k in registry.EXPORTERS.values()}
    assert _modules_defining_an_exporter() == registered
    for kind in registry.EXPORTERS.values():
        built = kind.factory()
        assert isinstance(built, type) and issubclass(built, Exporter), kind
        assert built.name == kind.name, "the kind's name is its exporter's"
        assert callable(kind.factory(rebuild=True))
        if kind.cli:
            flags = kind.flags()
            assert callable(flags.cli_arguments) and callable(flags.from_cli)


def test_a_spec_rebuilds_the_same_exporter(tmp_path):
    tb = TensorBoardExporter(str(tmp_path), subdir="g", include_badput_breakdown=False)
    spec = tb.process_spec()
    assert spec == {"exporter": "tensorboard",
                    "kwargs": {"tensorboard_dir": str(tmp_path), "subdir": "g",
                               "include_badput_breakdown": False}}
    again = registry.from_spec(spec)
    assert type(again) is TensorBoardExporter and again.process_spec() == spec
    import sys

    console = registry.from_spec(ConsoleExporter(sys.stderr).process_spec())
    assert type(console) is ConsoleExporter and console.process_spec()["kwargs"] == {
        "name": "stderr"}


def test_a_lazy_spec_rebuilds_a_lazy_exporter_of_the_same_kind():
    options = {"project_id": "p", "location": "l", "replica_id": "0", "acc_type": "t",
               "enable_gcp_goodput_metrics": True, "enable_gcp_step_deviation_metrics": True}
    here = registry.lazy("gcm", run="job", options=options, include_badput_breakdown=True)
    spec = here.process_spec()
    assert spec == {"exporter": "gcm", "lazy": True,
                    "kwargs": {"run": "job", "options": options,
                               "include_badput_breakdown": True}}
    there = registry.from_spec(spec)
    assert isinstance(there, LazyExporter) and there.inner is None
    assert (there.name, there.wants_trace, there.process_spec()) == (
        "Cloud Monitoring", False, spec)
    assert registry.lazy("otel-trace").wants_trace


@pytest.mark.parametrize("spec", [{"exporter": "os:system", "kwargs": {"command": "true"}},
                                  {"factory": "goodput_core.exporters.console:ConsoleExporter"},
                                  {"exporter": None}])
def test_nothing_but_a_registered_kind_is_built_from_a_spec(spec):
    with pytest.raises(ValueError, match="refusing to build an exporter"):
        registry.from_spec(spec)


@pytest.mark.parametrize("value,want", [("metrics,traces", ["otel", "otel-trace"]),
                                        ("traces", ["otel-trace"]), ("off", []), (None, [])])
def test_goodput_otel_selects_kinds_by_signal(value, want):
    env = {} if value is None else {"GOODPUT_OTEL": value}
    assert [k.name for k in registry.otel_from_env(env)] == want
