"""How our modules import each other (docs/architecture.md, layer rules 4, 5, 7
and 8), checked on the source: ``queries/`` reads downward, the engine imports
no adapter, nothing imports in a circle, nothing replaces entries of
``sys.modules`` but the MaxText opt-in alias, and every import of our own
modules inside a function says why it waits. Every import statement counts,
the ones inside functions included.
"""

from __future__ import annotations

import ast
import os

import pytest

from tests.support.source_scan import (
    ENGINE, INTEGRATIONS, a_circle, docstrings, imported, parse, py_files)

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
        tree = parse(os.path.join(folder, name))
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "goodput_core.queries":
                deps.update(alias.name for alias in node.names)  # from ...queries import x
        for _, module in imported(tree):
            names = module.split(".")
            if names[:2] == ["goodput_core", "queries"] and len(names) > 2:
                deps.add(names[2])
        graph[name[:-3]] = deps - {name[:-3]}
    return graph


def test_queries_read_downward():
    graph = _queries_graph()
    assert a_circle(graph) is None
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
        assert a_circle(graph) == ["calculator", "hangs", "calculator"]
    else:
        assert a_circle(graph) is None
        assert {m for m, deps in graph.items() if "calculator" in deps} == {"extra"}


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


def _adapter_violations():
    found = []
    for path in py_files(ENGINE):
        rel = os.path.relpath(path, ENGINE)
        tree = parse(path)
        for line, module in imported(tree):
            if module.split(".")[0] == "goodput_integrations":
                found.append(f"goodput_core/{rel}:{line} imports {module}")
        if rel in ADAPTER_NAMES_ALLOWED:
            continue
        docs = {id(n) for n in docstrings(tree)}
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
        for path in py_files(root):
            rel = os.path.relpath(path, root)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            files[".".join([package] + rel)] = path
    graph = {}
    for module, path in files.items():
        tree = parse(path)
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
    assert a_circle(_module_graph([("goodput_core", ENGINE),
                                    ("goodput_integrations", INTEGRATIONS)])) is None


def test_the_circle_check_sees_a_planted_circle_through_a_function_level_import(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("from pkg import b\n")
    (tmp_path / "b.py").write_text("def later():\n    from pkg.c import x\n")
    (tmp_path / "c.py").write_text("from . import a\n")
    assert a_circle(_module_graph([("pkg", str(tmp_path))])) == [
        "pkg.a", "pkg.b", "pkg.c", "pkg.a"]


# ------------------------------------------------------------ sys.modules
# The one module allowed to change sys.modules (integrations.md: the explicit,
# opt-in alias that serves ml_goodput_measurement from compat).
IMPORT_SYSTEM_ALLOWED = {os.path.join("goodput_integrations", "maxtext", "alias.py")}
OURS = ("goodput_core", "goodput_integrations")


def _is_sys(node, attr):
    return (isinstance(node, ast.Attribute) and node.attr == attr
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def _names_ours(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) \
        and node.value.split(".")[0] in OURS


def _changes_the_import_system(tree):
    """Lines that assign, delete or update entries of ``sys.modules``, or look
    one of our own modules up there (``sys.modules.get("goodput_core...")``,
    ``sys.modules["goodput_core..."]``, ``"goodput_core..." in sys.modules``):
    a lower layer reaching a higher one around the import graph, where the
    higher one should register a callable with it instead."""
    is_sys = _is_sys
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and is_sys(node.value, "modules") \
                and _names_ours(node.slice):
            yield node.lineno
            continue
        if isinstance(node, ast.Compare) and _names_ours(node.left) \
                and any(is_sys(c, "modules") for c in node.comparators):
            yield node.lineno
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and is_sys(node.func.value, "modules") and node.func.attr == "get" \
                and node.args and _names_ours(node.args[0]):
            yield node.lineno
            continue

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
        for path in py_files(root):
            rel = os.path.join(package, os.path.relpath(path, root))
            if rel not in IMPORT_SYSTEM_ALLOWED:
                found += [f"{rel}:{line}" for line in sorted(set(
                    _changes_the_import_system(parse(path))))]
    return found


def test_no_alias_modules_nothing_replaces_sys_modules_but_the_maxtext_opt_in():
    assert _import_system_changes([("goodput_core", ENGINE),
                                   ("goodput_integrations", INTEGRATIONS)]) == []


def test_the_import_system_check_sees_an_alias_module(tmp_path):
    (tmp_path / "watchdog.py").write_text(
        "import sys; import goodput_core.record.watchdog as _m; sys.modules[__name__] = _m\n")
    (tmp_path / "setter.py").write_text("import sys\nsys.modules.setdefault('x', sys)\n")
    (tmp_path / "reader.py").write_text("import sys\nloaded = sys.modules.get('x')\n")
    (tmp_path / "upward.py").write_text(
        "import sys\n"
        "hooks = sys.modules.get('goodput_core.record.hooks')\n"
        "loaded = 'goodput_integrations.jax' in sys.modules\n"
        "calc = sys.modules['goodput_core.queries.calculator']\n"
        "torch = sys.modules.get('torch')\n")
    assert _import_system_changes([("pkg", str(tmp_path))]) == [
        os.path.join("pkg", "setter.py") + ":2", os.path.join("pkg", "upward.py") + ":2",
        os.path.join("pkg", "upward.py") + ":3", os.path.join("pkg", "upward.py") + ":4",
        os.path.join("pkg", "watchdog.py") + ":1"]



# ------------------------------------------------------------ imports inside functions
# Files excepted from the rule below (none now; the branches in flight when it came
# gave their imports their reasons).
LAZY_PENDING: set = set()


def _in_function_imports(tree):
    """(statement, the statements of its block) for each import of our own
    modules inside a function; a block: imports on consecutive lines."""
    def ours(node):
        if isinstance(node, ast.ImportFrom):
            return node.level > 0 or (node.module or "").split(".")[0] in OURS
        return any(a.name.split(".")[0] in OURS for a in node.names)

    def visit(node, inside):
        for field in ("body", "orelse", "finalbody", "handlers"):
            statements = getattr(node, field, None)
            if not isinstance(statements, list):
                continue
            block = []
            for child in statements:
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    if not block or block[-1].end_lineno != child.lineno - 1:
                        block = []
                    block.append(child)
                    if inside and ours(child):
                        yield child, block[0]
                else:
                    block = []
                    yield from visit(child, inside or isinstance(
                        child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    yield from visit(tree, False)


def _unexplained_lazy_imports(roots):
    """Imports of our own modules inside a function without ``# lazy: <why>``
    on the statement's first line or in the comment lines right above its
    block of imports."""
    found = []
    for package, root in roots:
        for path in py_files(root):
            rel = os.path.join(package, os.path.relpath(path, root))
            if rel in LAZY_PENDING:
                continue
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
            for node, first in _in_function_imports(parse(path)):
                said = [lines[node.lineno - 1]]
                above = first.lineno - 2
                while above >= 0 and lines[above].strip().startswith("#"):
                    said.append(lines[above])
                    above -= 1
                if not any("# lazy: " in line for line in said):
                    found.append(f"{rel}:{node.lineno}")
    return found


def test_every_import_inside_a_function_says_why_it_waits():
    """An import of our own modules inside a function keeps an import light (a
    client library, numpy, a framework, or the modules that pull those in),
    waits for something to happen first, or breaks a declared upward arrow;
    it says which, so that the reason can be checked when it no longer holds."""
    assert _unexplained_lazy_imports([("goodput_core", ENGINE),
                                      ("goodput_integrations", INTEGRATIONS)]) == []


def test_the_lazy_import_check_sees_an_unexplained_one(tmp_path):
    (tmp_path / "a.py").write_text(
        "import goodput_core\n"
        "def f():\n"
        "    from goodput_core.queries import calculator\n"
        "    import json\n"
        "    # lazy: numpy, and a comment\n"
        "    # of two lines\n"
        "    from goodput_core.stores import sqlite\n"
        "    from . import b\n"
        "    x = 1\n"
        "    from . import c  # lazy\n"
        "    if x:\n"
        "        from . import d  # lazy: the monitor process lowers its priority first\n"
        "class K:\n"
        "    def m(self):\n"
        "        try:\n"
        "            import goodput_integrations.jax\n"
        "        except ImportError:\n"
        "            pass\n"
        "from . import e\n")
    assert _unexplained_lazy_imports([("pkg", str(tmp_path))]) == [
        f"{os.path.join('pkg', 'a.py')}:{n}" for n in (3, 10, 16)]
