"""The layer rules of docs/architecture.md, checked on the source (with
tests/core/test_layout_stores.py and tests/core/test_layout_imports.py).

The layers, bottom up: stores -> record -> timeline -> queries -> exporters ->
monitor, the command line on top and the compat layer beside (the recorder
imports the store it writes into, the monitor the exporters it feeds): a
module may import what comes before it, never what comes after, and nothing
but compat imports compat. Every import statement counts, the ones inside
functions included. The tests mirror the groups; no module of the package or
of the suite is longer than 500 lines; the public paths the docs show import.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from goodput_core import gcp
from goodput_core.compat import goodput_utils
from tests.support.source_scan import ENGINE, INTEGRATIONS, imported, parse, py_files

REPO = Path(__file__).resolve().parents[2]

# group (a sub-package of goodput_core) -> the groups it must not import
FORBIDDEN = {
    "record": {"timeline", "queries", "monitor", "exporters", "cli", "compat"},
    "stores": {"record", "timeline", "queries", "monitor", "exporters", "cli", "compat"},
    "timeline": {"queries", "monitor", "exporters", "cli", "compat"},
    "queries": {"monitor", "exporters", "cli", "compat"},
    "exporters": {"monitor", "cli", "compat"},
    "monitor": {"cli", "compat"},
    "cli": {"compat"},
    # the shared top-level modules (events, settings, text, gcp)
    "": {"record", "stores", "timeline", "queries", "monitor", "exporters", "cli", "compat"},
}
# goodput_core/__init__.py is the public surface: it imports what it exports (the
# calculator, the monitor and the exporters on first use: every user-facing name
# of the README and docs/ is importable from goodput_core).
TOP_LEVEL_EXCEPTIONS = {"__init__.py": {"record", "stores", "timeline", "queries", "monitor",
                                        "exporters"}}
# One declared exception: the hang watchdog measures a hang against the ideal step
# time, whose one definition (semantics.md rule 12) is in queries/step_stats; it
# imports it on first use, never at import.
ALLOWED = {(os.path.join("record", "watchdog.py"), "goodput_core.queries.step_stats")}


def _group_of(module: str) -> str:
    """'goodput_core.queries.calculator' -> 'queries'; a shared top-level module -> its name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _violations():
    found = []
    for path in py_files(ENGINE):
        rel = os.path.relpath(path, ENGINE)
        parts = rel.split(os.sep)
        if parts[0] == "compat":
            continue  # compat may import anything of the engine
        group = parts[0] if len(parts) > 1 else ""
        forbidden = FORBIDDEN[group] - TOP_LEVEL_EXCEPTIONS.get(rel, set())
        for line, module in imported(parse(path)):
            if module.split(".")[0] != "goodput_core":
                continue
            target = _group_of(module)
            if target in forbidden and target != group and (rel, module) not in ALLOWED:
                found.append(f"goodput_core/{rel}:{line} imports {module}")
    return found


def test_every_engine_module_belongs_to_a_known_group():
    groups = {d for d in os.listdir(ENGINE)
              if os.path.isfile(os.path.join(ENGINE, d, "__init__.py"))}
    assert groups == set(FORBIDDEN) - {""} | {"compat"}


def test_imports_follow_the_data_flow_and_the_engine_never_imports_compat():
    assert _violations() == []


@pytest.mark.parametrize("rule", [("record", "queries"), ("stores", "record"),
                                  ("", "compat"), ("exporters", "monitor")])
def test_the_scan_sees_a_planted_wrong_way_import(rule, tmp_path, monkeypatch):
    """The check itself: a module importing against the flow is reported."""
    group, target = rule
    folder = tmp_path / group if group else tmp_path
    folder.mkdir(exist_ok=True)
    for g in set(FORBIDDEN) - {""} | {"compat"}:
        (tmp_path / g).mkdir(exist_ok=True)
        (tmp_path / g / "__init__.py").write_text("")
    (folder / "planted.py").write_text(
        f"def later():\n    from goodput_core.{target} import something\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["_"]), "ENGINE", str(tmp_path))
    assert _violations() == [
        f"goodput_core/{os.path.join(group, 'planted.py') if group else 'planted.py'}:2 "
        f"imports goodput_core.{target}"]


# ------------------------------------------------------------ small modules
#: The longest a module of the package or of the suite may be: a longer one is
#: split by responsibility (docs/architecture.md, "Small modules").
MAX_LINES = 500
SIZED = (("goodput_core", ENGINE), ("integrations", INTEGRATIONS),
         ("tests", str(REPO / "tests")), ("benchmarks", str(REPO / "benchmarks")))


def _long_modules(roots):
    found = []
    for label, root in roots:
        for path in py_files(root):
            with open(path, encoding="utf-8") as f:
                lines = len(f.read().splitlines())
            if lines > MAX_LINES:
                found.append(f"{label}/{os.path.relpath(path, root)}: {lines} lines")
    return found


def test_no_module_of_the_package_or_the_suite_is_over_500_lines():
    assert _long_modules(SIZED) == []


def test_the_size_check_sees_a_planted_long_module(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "full.py").write_text("x = 1\n" * MAX_LINES)
    assert _long_modules([("pkg", str(tmp_path))]) == [
        f"pkg/{os.path.join('sub', 'long.py')}: {MAX_LINES + 1} lines"]


# ------------------------------------------------------------ tests/core/
# Tests of the shared top-level modules and of the project as a whole.
PROJECT_WIDE_TESTS = {"test_docs_links.py", "test_layout.py", "test_layout_imports.py",
                      "test_layout_stores.py", "test_packaging.py",
                      "test_redact.py", "test_settings.py", "test_suite_hygiene.py",
                      "test_time_zones.py"}


def test_the_engines_tests_mirror_its_groups():
    """tests/core/<group>/ for each group of goodput_core; nothing else at the top."""
    here = os.path.dirname(os.path.abspath(__file__))
    folders = {d for d in os.listdir(here) if os.path.isdir(os.path.join(here, d))
               and d != "__pycache__"}
    assert folders == set(FORBIDDEN) - {""} | {"compat"}
    top = {n for n in os.listdir(here) if n.startswith("test_") and n.endswith(".py")}
    assert top == PROJECT_WIDE_TESTS, "a test of one group belongs in its folder"


def test_compat_reexports_the_engines_metadata_helpers():
    for name in gcp.__all__:
        assert getattr(goodput_utils, name) is getattr(gcp, name), name


def test_the_documented_paths_import():
    """The public paths the docs show (docs/install.md, "Layout and module paths")."""
    import goodput_core.monitor
    from goodput_core.monitor import Monitor
    from goodput_core.monitor.loop import Monitor as LoopMonitor
    from goodput_core.queries.diagnostics import RunContext, record_config  # noqa: F401
    from goodput_core.queries.run_groups import record_run_group  # noqa: F401
    from goodput_core.record.watchdog import HangSettings  # noqa: F401
    from goodput_core.stores.cloud_logging import CloudLoggingStore
    from goodput_core.stores.postgres import PostgresStore
    from goodput_core.stores.sqlite import SqliteStore

    assert Monitor is LoopMonitor is goodput_core.monitor.Monitor
    assert goodput_core.Calculator.__module__ == "goodput_core.queries.calculator"
    assert SqliteStore.__module__ == "goodput_core.stores.sqlite.store"
    assert PostgresStore.__module__ == "goodput_core.stores.postgres.store"
    assert CloudLoggingStore.__module__ == "goodput_core.stores.cloud_logging.store"


def test_python_m_cli_and_a_light_monitor_package():
    """``python -m goodput_core.cli`` runs the command; importing the monitor package
    for background_start (adapters do at import) loads no numpy."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "goodput_core.cli", "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("usage: goodput")
    code = ("import sys, goodput_core.monitor.background_start; "
            "print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_every_documented_user_facing_name_is_importable_from_goodput_core():
    """The names the README and docs/ show users come from ``goodput_core`` itself
    (a user should not have to know that HangSettings lives in record.watchdog),
    and ``import goodput_core`` still loads no numpy and no client library."""
    import subprocess
    import sys

    documented = ["Recorder", "HangSettings", "Calculator", "GoodputResult", "BadputType",
                  "RunContext", "record_config", "Monitor", "ConsoleExporter",
                  "TensorBoardExporter", "PrometheusExporter", "CloudMonitoringExporter",
                  "OtelExporter", "OtelTraceExporter", "GCPOptions", "NULL_RECORDER"]
    code = ("import sys, goodput_core; "
            "print(sorted(m for m in ('numpy', 'prometheus_client', 'opentelemetry', "
            "'tensorboardX', 'google.cloud.monitoring_v3') if m in sys.modules)); "
            f"import goodput_core as g; print([getattr(g, n).__name__ for n in {documented!r} "
            "if n != 'NULL_RECORDER'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    light, names = out.stdout.splitlines()
    assert light == "[]"
    assert names == str([n for n in documented if n != "NULL_RECORDER"])
    import goodput_core

    assert set(documented) <= set(goodput_core.__all__)
    from goodput_core.record.watchdog import HangSettings
    from goodput_core.queries.diagnostics import RunContext, record_config

    assert (goodput_core.HangSettings, goodput_core.RunContext, goodput_core.record_config) == \
        (HangSettings, RunContext, record_config)
