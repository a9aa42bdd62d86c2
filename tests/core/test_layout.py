"""The direction rules of the README's Layout section, checked on the source.

Data flows record -> stores -> timeline -> queries -> monitor -> exporters, with
the command line on top and the compat layer beside: a module may import what
comes before it, never what comes after, and nothing but compat imports compat.
Every import statement counts, the ones inside functions included.
"""

from __future__ import annotations

import ast
import os

import pytest

import goodput_core
from goodput_core import gcp
from goodput_core.compat import goodput_utils

ENGINE = os.path.dirname(os.path.abspath(goodput_core.__file__))

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
# calculator on first use).
TOP_LEVEL_EXCEPTIONS = {"__init__.py": {"record", "stores", "queries"}}
# One declared exception: the hang watchdog measures a hang against the ideal step
# time, whose one definition (semantics.md rule 12) is in queries/step_stats; it
# imports it on first use, never at import.
ALLOWED = {(os.path.join("record", "watchdog.py"), "goodput_core.queries.step_stats")}


def _group_of(module: str) -> str:
    """'goodput_core.queries.calculator' -> 'queries'; a shared top-level module -> its name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imported(tree: ast.AST):
    """(line, dotted module) for each goodput_core module the tree imports."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            if node.module == "goodput_core":  # from goodput_core import queries
                for alias in node.names:
                    yield node.lineno, f"goodput_core.{alias.name}"


def _engine_files():
    for base, dirs, files in os.walk(ENGINE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(base, name)


def _violations():
    found = []
    for path in _engine_files():
        rel = os.path.relpath(path, ENGINE)
        parts = rel.split(os.sep)
        if parts[0] == "compat":
            continue  # compat may import anything of the engine
        group = parts[0] if len(parts) > 1 else ""
        forbidden = FORBIDDEN[group] - TOP_LEVEL_EXCEPTIONS.get(rel, set())
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for line, module in _imported(tree):
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


def test_compat_reexports_the_engines_metadata_helpers():
    for name in gcp.__all__:
        assert getattr(goodput_utils, name) is getattr(gcp, name), name


def test_the_documented_paths_import():
    """README Layout: the public paths the docs show."""
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
