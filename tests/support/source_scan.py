"""Reading our own source for the layout checks (tests/core/test_layout*.py):
the files of a folder, the modules a file imports, the module graph, its circles.

Every function takes the folder it reads, so that each check can be shown
failing on a planted violation in a temporary folder.
"""

from __future__ import annotations

import ast
import os

import goodput_core
import goodput_integrations

ENGINE = os.path.dirname(os.path.abspath(goodput_core.__file__))
INTEGRATIONS = os.path.dirname(os.path.abspath(goodput_integrations.__file__))


def py_files(root: str):
    """Every ``.py`` file under ``root``, sorted, ``__pycache__`` left out."""
    for base, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(base, name)


def parse(path: str) -> ast.AST:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def imported(tree: ast.AST):
    """(line, dotted module) for each absolute import in ``tree``; ``from
    goodput_core import x`` also yields ``goodput_core.x``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            if node.module == "goodput_core":  # from goodput_core import queries
                for alias in node.names:
                    yield node.lineno, f"goodput_core.{alias.name}"


def docstrings(tree: ast.AST):
    """The nodes of the docstrings in ``tree`` (module, classes, functions)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                yield body[0].value


def a_circle(graph):
    """One import circle of ``graph`` ({module: modules it imports}) as a list
    of modules, or None."""
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
