"""The distribution is ``goodput-core`` (PyPI's ``goodput`` is an unrelated
project); the import package is ``goodput_core`` and the command ``goodput``."""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def test_the_distribution_name_and_the_all_extra():
    project = pyproject()
    assert project["name"] == "goodput-core"
    (everything,) = project["optional-dependencies"]["all"]
    name, extras = re.fullmatch(r"([\w-]+)\[([\w,]+)\]", everything).groups()
    assert name == "goodput-core"
    # every extra but the test tools and PyTorch's: torch is gigabytes from PyPI
    # (the CUDA build), installed by `make test-torch` only
    assert set(extras.split(",")) == set(project["optional-dependencies"]) - {
        "all", "test", "torch", "torch-trainers"}
    assert project["scripts"] == {"goodput": "goodput_core.cli:main"}


def test_the_installed_distribution_provides_the_goodput_command():
    dist = importlib.metadata.distribution("goodput-core")
    scripts = {e.name: e.value for e in dist.entry_points if e.group == "console_scripts"}
    assert scripts == {"goodput": "goodput_core.cli:main"}


def test_install_hints_name_the_distribution():
    """Every `pip install '...[extra]'` in code and docs names goodput-core (or
    MaxText's own `maxtext[tpu]`, which MaxText users install)."""
    hint = re.compile(r"pip install\s+['\"]?([\w.-]+)\[")
    wrong = []
    for base, dirs, files in os.walk(ROOT):
        # build/ and dist/ are ignored outputs (make test-maxtext puts a venv there)
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"
                   and not d.endswith(".egg-info")
                   and not (base == str(ROOT) and d in ("build", "dist"))]
        for name in files:
            if not name.endswith((".py", ".md")) or name == "test_packaging.py":
                continue
            path = os.path.join(base, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    for dist in hint.findall(line):
                        if dist not in ("goodput-core", "maxtext"):
                            wrong.append(f"{os.path.relpath(path, ROOT)}:{n}: {dist}")
    assert wrong == []


def test_every_package_folder_is_in_the_distribution():
    """setuptools installs only the packages pyproject lists: a sub-package left out
    (a new folder of the regrouping, compat/mldiagnostics before it) works from a
    checkout and is missing from the wheel."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        tool = tomllib.load(f)["tool"]["setuptools"]
    listed = set(tool["packages"])
    folders = {"goodput_core": "goodput_core", "integrations": "goodput_integrations"}
    assert tool["package-dir"] == {"goodput_integrations": "integrations"}
    found = set()
    for folder, name in folders.items():
        for base, dirs, files in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            if "__init__.py" in files:
                rel = os.path.relpath(base, os.path.join(ROOT, folder))
                found.add(name if rel == "." else name + "." + rel.replace(os.sep, "."))
    # data folders (no __init__.py) are listed too, each with its package data:
    # setuptools warns that a folder Python can import and `packages` leaves out
    # "would be ignored"
    data = {name for name in listed - found if name in tool["package-data"]}
    assert data == {"goodput_core.cli.serve.static", "goodput_core.exporters.dashboards"}
    assert found == listed - data
