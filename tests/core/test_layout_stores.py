"""The store backends' layout (docs/architecture.md, layer rule 3), checked on the source.

Each backend of the registry (``stores/schemes.py``) is a subpackage of
``stores/`` that imports no other backend; what they share sits beside them and
imports none; and only a backend names its schemes: everything else asks the
registry.
"""

from __future__ import annotations

import ast
import os

from goodput_core.stores.schemes import SCHEMES
from tests.support.source_scan import ENGINE, INTEGRATIONS, docstrings, imported, parse, py_files

# ------------------------------------------------------------ backends
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
    for path in py_files(stores):
        rel = os.path.relpath(path, stores)
        parts = rel.split(os.sep)
        backend = parts[0] if len(parts) > 1 else None
        for line, module in imported(parse(path)):
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
        for path in py_files(root):
            rel = os.path.relpath(path, root)
            parts = rel.split(os.sep)
            if rel in SCHEME_TEXT_ALLOWED or (
                    label == "goodput_core" and parts[0] == "stores" and (
                        parts[1] in BACKENDS or parts[1] == "memory.py")):
                continue
            tree = parse(path)
            docs = {id(n) for n in docstrings(tree)}
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

