"""The layer rules of docs/architecture.md, checked on the source.

The layers, bottom up: stores -> record -> timeline -> queries -> exporters ->
monitor, the command line on top and the compat layer beside (the recorder
imports the store it writes into, the monitor the exporters it feeds): a
module may import what comes before it, never what comes after, and nothing
but compat imports compat. The engine imports no adapter, and nothing, engine
or adapters, imports in a circle.
Inside the groups: each store backend is a subpackage of ``stores/`` that
imports no other backend (what they share sits beside them and imports none);
``queries/`` reads downward (no import circle; only the modules that compose
calculators import the calculator, which is one class); and nothing replaces
entries of ``sys.modules`` except the MaxText opt-in alias.
Every import statement counts, the ones inside functions included.
"""

from __future__ import annotations

import ast
import os

import pytest

import goodput_core
import goodput_integrations
from goodput_core import gcp
from goodput_core.compat import goodput_utils
from goodput_core.stores.schemes import SCHEMES

ENGINE = os.path.dirname(os.path.abspath(goodput_core.__file__))
INTEGRATIONS = os.path.dirname(os.path.abspath(goodput_integrations.__file__))

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


# ------------------------------------------------------------ stores/
# The backends of the registry (stores/schemes.py) that are subpackages (memory is a module).
BACKENDS = {module for module in (s.open.__module__.split(".")[2] for s in SCHEMES)
            if os.path.isdir(os.path.join(ENGINE, "stores", module))}
# Shared store modules that name a backend: the registry lists them, the stores'
# package re-exports sqlite_location, the deferred store registers its fork hooks
# after sqlite's.
STORE_ALLOWED = ({("schemes.py", b) for b in BACKENDS}
                 | {("__init__.py", "sqlite"), ("deferred.py", "sqlite")})


def _store_violations():
    found = []
    stores = os.path.join(ENGINE, "stores")
    for path in _engine_files():
        rel = os.path.relpath(path, stores)
        if rel.startswith(".."):
            continue
        parts = rel.split(os.sep)
        backend = parts[0] if len(parts) > 1 else None
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for line, module in _imported(tree):
            names = module.split(".")
            if names[:2] != ["goodput_core", "stores"] or len(names) < 3:
                continue
            target = names[2] if names[2] in BACKENDS else None
            if target is None or target == backend or (rel, target) in STORE_ALLOWED:
                continue
            found.append(f"goodput_core/stores/{rel}:{line} imports {module}")
    return found


def test_each_store_backend_is_a_subpackage_and_imports_no_other():
    stores = os.path.join(ENGINE, "stores")
    packages = {d for d in os.listdir(stores)
                if os.path.isfile(os.path.join(stores, d, "__init__.py"))}
    assert packages == BACKENDS
    flat = [n for n in os.listdir(stores) if n.endswith(".py")
            and any(n.startswith(b + "_") for b in BACKENDS)]
    assert flat == [], "a backend's module belongs in its subpackage"
    assert _store_violations() == []


# ------------------------------------------------------------ store schemes
# What depends on the kind of store asks the registry (stores/schemes.py); only a
# backend names its own schemes. Declared exceptions: redact.py imports nothing of
# goodput (the database schemes whose user name is a role, not a secret), and the
# AXLearn spec parser takes the schemes it documents (not PostgreSQL's).
SCHEME_TEXT_ALLOWED = {"redact.py", os.path.join("axlearn", "spec.py")}


def _scheme_texts():
    """A string constant in code (not a docstring) that is a scheme name or a
    scheme prefix (``sqlite``, ``sqlite:``, ``sqlite://``): a comparison with a
    scheme outside the backend that owns it."""
    forms = {f for s in SCHEMES for n in s.names for f in (n, n + ":", n + "://")}
    found = []
    for root, label in ((ENGINE, "goodput_core"), (INTEGRATIONS, "integrations")):
        for base, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(base, name)
                rel = os.path.relpath(path, root)
                parts = rel.split(os.sep)
                if rel in SCHEME_TEXT_ALLOWED or (
                        label == "goodput_core" and parts[0] == "stores" and (
                            parts[1] in BACKENDS or parts[1] == "memory.py")):
                    continue
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), path)
                docs = {id(n.body[0].value) for n in ast.walk(tree)
                        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                          ast.AsyncFunctionDef))
                        and n.body and isinstance(n.body[0], ast.Expr)
                        and isinstance(n.body[0].value, ast.Constant)}
                for node in ast.walk(tree):
                    if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                            and node.value in forms and id(node) not in docs:
                        found.append(f"{label}/{rel}:{node.lineno} {node.value!r}")
    return found


def test_only_the_registry_and_the_backends_know_store_schemes():
    assert _scheme_texts() == []


def test_the_scheme_check_sees_a_planted_comparison(tmp_path, monkeypatch):
    for backend in BACKENDS:
        (tmp_path / "stores" / backend).mkdir(parents=True)
        (tmp_path / "stores" / backend / "__init__.py").write_text(
            'SCHEME = ("sqlite", "postgresql")\n')  # a backend's own: allowed
    (tmp_path / "monitor").mkdir()
    (tmp_path / "monitor" / "planted.py").write_text(
        '"""Reads sqlite:// stores."""\n'
        'def child(url, scheme):\n'
        '    return scheme == "memory" or url.startswith(("sqlite:", "cloud-logging://"))\n')
    module = __import__(__name__, fromlist=["_"])
    monkeypatch.setattr(module, "ENGINE", str(tmp_path))
    monkeypatch.setattr(module, "INTEGRATIONS", str(tmp_path / "none"))
    assert _scheme_texts() == [
        "goodput_core/monitor/planted.py:3 'memory'",
        "goodput_core/monitor/planted.py:3 'sqlite:'",
        "goodput_core/monitor/planted.py:3 'cloud-logging://'"]


# ------------------------------------------------------------ queries/
# Modules that build calculators (above the calculator in the graph).
COMPOSING = {"summaries"}


def _queries_graph():
    """{module of queries/: the modules of queries/ it imports}."""
    graph = {}
    folder = os.path.join(ENGINE, "queries")
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            tree = ast.parse(f.read(), name)
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "goodput_core.queries":
                deps.update(alias.name for alias in node.names)  # from ...queries import x
        for _, module in _imported(tree):
            names = module.split(".")
            if names[:2] == ["goodput_core", "queries"] and len(names) > 2:
                deps.add(names[2])
        graph[name[:-3]] = deps - {name[:-3]}
    return graph


def _a_circle(graph):
    """One import circle of ``graph`` as a list of modules, or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return None


def test_queries_read_downward():
    graph = _queries_graph()
    assert _a_circle(graph) is None
    assert {m for m, deps in graph.items() if "calculator" in deps} <= COMPOSING
    from goodput_core.queries.calculator import Calculator

    assert Calculator.__bases__ == (object,), "the calculator's public surface is one class"


@pytest.mark.parametrize("planted", ["circle", "composer"])
def test_the_queries_checks_see_a_planted_circle_and_a_stray_composer(planted, tmp_path,
                                                                      monkeypatch):
    folder = tmp_path / "queries"
    folder.mkdir()
    (folder / "calculator.py").write_text("from goodput_core.queries import hangs\n")
    if planted == "circle":
        (folder / "hangs.py").write_text("def later():\n"
                                         "    from goodput_core.queries.calculator import x\n")
    else:
        (folder / "hangs.py").write_text("")
        (folder / "extra.py").write_text("from goodput_core.queries.calculator import x\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["_"]), "ENGINE", str(tmp_path))
    graph = _queries_graph()
    if planted == "circle":
        assert _a_circle(graph) == ["calculator", "hangs", "calculator"]
    else:
        assert _a_circle(graph) is None
        assert {m for m, deps in graph.items() if "calculator" in deps} == {"extra"}


def test_the_store_check_sees_a_planted_cross_backend_import(tmp_path, monkeypatch):
    for backend in BACKENDS:
        (tmp_path / "stores" / backend).mkdir(parents=True)
    (tmp_path / "stores" / "postgres" / "store.py").write_text(
        "from goodput_core.stores.sqlite import strict\n")
    (tmp_path / "stores" / "shared.py").write_text(
        "from goodput_core.stores.postgres.sql import redact\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["_"]), "ENGINE", str(tmp_path))
    assert sorted(_store_violations()) == [
        "goodput_core/stores/postgres/store.py:1 imports goodput_core.stores.sqlite",
        "goodput_core/stores/shared.py:1 imports goodput_core.stores.postgres.sql"]


# ------------------------------------------------------------ adapters
# The engine sits below the adapters: it never imports goodput_integrations, and
# names an adapter module (as text) only in these declared places.
ADAPTER_NAMES_ALLOWED = {
    # the ML-diagnostics SDK's table of the adapter parts it runs, imported on use
    os.path.join("compat", "mldiagnostics", "_frameworks.py"),
    # the demo's training programs, run as ``python -m``, never imported
    os.path.join("cli", "demo_attempts.py"), os.path.join("cli", "demo_torchrun.py"),
    # finds the adapters' folder (find_spec) to tell our frames from the user's
    os.path.join("record", "stacks.py"),
}


def _docstrings(tree):
    """The nodes of the docstrings in ``tree`` (module, classes, functions)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                yield body[0].value


def _adapter_violations():
    found = []
    for path in _engine_files():
        rel = os.path.relpath(path, ENGINE)
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for line, module in _imported(tree):
            if module.split(".")[0] == "goodput_integrations":
                found.append(f"goodput_core/{rel}:{line} imports {module}")
        if rel in ADAPTER_NAMES_ALLOWED:
            continue
        docs = {id(n) for n in _docstrings(tree)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docs \
                    and node.value.startswith("goodput_integrations"):
                found.append(f"goodput_core/{rel}:{node.lineno} names {node.value}")
    return found


def test_the_engine_never_imports_an_adapter():
    assert _adapter_violations() == []


def test_the_adapter_check_sees_a_planted_import_and_a_module_named_by_text(tmp_path,
                                                                           monkeypatch):
    (tmp_path / "compat").mkdir()
    (tmp_path / "compat" / "planted.py").write_text(
        "def later():\n    from goodput_integrations.jax import profiling\n")
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "named.py").write_text(
        '"""Uses goodput_integrations.jax (a docstring may say so)."""\n'
        "import importlib\nx = importlib.import_module('goodput_integrations.jax')\n")
    (tmp_path / "cli" / "demo_attempts.py").write_text("M = 'goodput_integrations.demo.train'\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["_"]), "ENGINE", str(tmp_path))
    assert sorted(_adapter_violations()) == [
        f"goodput_core/{os.path.join('cli', 'named.py')}:3 names goodput_integrations.jax",
        f"goodput_core/{os.path.join('compat', 'planted.py')}:2 imports "
        "goodput_integrations.jax"]


# ------------------------------------------------------------ no circle
def _module_graph(roots):
    """{dotted module: the modules of ``roots`` it imports}, every import
    statement counted (inside functions too); ``roots``: (package, folder)."""
    files = {}
    for package, root in roots:
        for base, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(n for n in names if n.endswith(".py")):
                rel = os.path.relpath(os.path.join(base, name), root)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                files[".".join([package] + rel)] = os.path.join(base, name)
    graph = {}
    for module, path in files.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        here = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in files)
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + [node.module or ""]
                                if node.level else [node.module or ""]).strip(".")
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    deps.add(target if target in files else base)
        graph[module] = {d for d in deps if d in files} - {module}
    return graph


def test_no_import_circle_in_the_engine_or_the_adapters():
    """No module imports, directly or through others, a module that imports it
    (structure drawers then show the layers as they are)."""
    assert _a_circle(_module_graph([("goodput_core", ENGINE),
                                    ("goodput_integrations", INTEGRATIONS)])) is None


def test_the_circle_check_sees_a_planted_circle_through_a_function_level_import(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("from pkg import b\n")
    (tmp_path / "b.py").write_text("def later():\n    from pkg.c import x\n")
    (tmp_path / "c.py").write_text("from . import a\n")
    assert _a_circle(_module_graph([("pkg", str(tmp_path))])) == [
        "pkg.a", "pkg.b", "pkg.c", "pkg.a"]


# ------------------------------------------------------------ sys.modules
# The one module allowed to change sys.modules (integrations.md: the explicit,
# opt-in alias that serves ml_goodput_measurement from compat).
IMPORT_SYSTEM_ALLOWED = {os.path.join("goodput_integrations", "maxtext", "alias.py")}


def _changes_the_import_system(tree):
    """Lines that assign, delete or update entries of ``sys.modules``."""
    def is_sys(node, attr):
        return (isinstance(node, ast.Attribute) and node.attr == attr
                and isinstance(node.value, ast.Name) and node.value.id == "sys")

    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        if any(isinstance(t, ast.Subscript) and is_sys(t.value, "modules") for t in targets):
            yield node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and is_sys(node.func.value, "modules") \
                and node.func.attr not in ("get", "copy", "keys", "values", "items"):
            yield node.lineno


def _import_system_changes(roots):
    found = []
    for package, root in roots:
        for base, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(base, name)
                rel = os.path.join(package, os.path.relpath(path, root))
                if rel in IMPORT_SYSTEM_ALLOWED:
                    continue
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), path)
                found += [f"{rel}:{line}" for line in _changes_the_import_system(tree)]
    return found


def test_no_alias_modules_nothing_replaces_sys_modules_but_the_maxtext_opt_in():
    assert _import_system_changes([("goodput_core", ENGINE),
                                   ("goodput_integrations", INTEGRATIONS)]) == []


def test_the_import_system_check_sees_an_alias_module(tmp_path):
    (tmp_path / "watchdog.py").write_text(
        "import sys; import goodput_core.record.watchdog as _m; sys.modules[__name__] = _m\n")
    (tmp_path / "setter.py").write_text("import sys\nsys.modules.setdefault('x', sys)\n")
    (tmp_path / "reader.py").write_text("import sys\nloaded = sys.modules.get('x')\n")
    assert _import_system_changes([("pkg", str(tmp_path))]) == [
        os.path.join("pkg", "setter.py") + ":2", os.path.join("pkg", "watchdog.py") + ":1"]


# ------------------------------------------------------------ tests/core/
# Tests of the shared top-level modules and of the project as a whole.
PROJECT_WIDE_TESTS = {"test_docs_links.py", "test_layout.py", "test_packaging.py",
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
