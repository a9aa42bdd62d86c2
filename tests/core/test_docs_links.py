"""The documentation lives in the repository and says true things about it.

* no file points outside the repository (to the design notes it was built from);
* every relative link in README.md and docs/*.md leads to a file that exists;
* every test that docs/semantics.md and docs/differences.md name as pinning a
  rule exists in the test tree, and every test file a page names exists.
"""

from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", "goodput_demo_output"}
TEXT_SUFFIXES = (".py", ".md", ".toml", ".cfg", ".txt", ".yaml", ".yml", ".sh", "Makefile", "run")
DOCS = ["README.md", "benchmarks/README.md"] + [
    os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs")))
    if f.endswith(".md")]


def repository_text_files():
    for base, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            if name.endswith(TEXT_SUFFIXES):
                yield os.path.join(base, name)


def test_no_file_points_outside_the_repository():
    me = os.path.abspath(__file__)
    outside = re.compile(r"\.\./shared|shared/spec")
    found = []
    for path in repository_text_files():
        if os.path.abspath(path) == me:
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if outside.search(line):
                    found.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
    assert found == []


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_resolve(doc):
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # code is not links
    text = re.sub(r"`[^`\n]*`", "", text)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://|#|mailto:", target):
            continue
        path = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), target.split("#")[0]))
        if not path.startswith(ROOT + os.sep) or not os.path.exists(path):
            broken.append(target)
    assert broken == []


def _test_names():
    names = set()
    for base, dirs, files in os.walk(os.path.join(ROOT, "tests")):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                with open(os.path.join(base, name), encoding="utf-8") as f:
                    names.update(re.findall(r"^def (test_\w+)", f.read(), re.MULTILINE))
    return names


@pytest.mark.parametrize("doc", ["docs/semantics.md", "docs/differences.md"])
def test_every_named_test_exists(doc):
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        text = f.read()
    named = set(re.findall(r"\b(test_\w+)`", text))
    assert named, "the page names no test"
    assert sorted(named - _test_names()) == []


def test_semantics_page_covers_every_rule():
    with open(os.path.join(ROOT, "docs", "semantics.md"), encoding="utf-8") as f:
        text = f.read()
    for n in range(1, 13):
        section = text.split(f"## Rule {n} ")[1].split("\n## ")[0]
        assert "*Example" in section, f"rule {n} has no worked example"
        assert "Pinned by" in section, f"rule {n} names no test"


@pytest.mark.parametrize("doc", DOCS)
def test_docs_cite_only_pages_users_have(doc):
    """A page named in the docs (``events.md``, ``specs.md``...) is one of ours:
    the design notes the code was built from, and the team's issue numbers,
    are not shipped, so citing them sends readers nowhere."""
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        text = f.read()
    ours = {name for base in (ROOT, os.path.join(ROOT, "docs"), os.path.join(ROOT, "benchmarks"))
            for name in os.listdir(base) if name.endswith(".md")}
    cited = set(re.findall(r"(?<![\w/.-])([\w-]+\.md)\b", text))
    assert sorted(cited - ours) == []
    assert re.findall(r"\b[Ii]ssue \d+\b", text) == []


@pytest.mark.parametrize("doc", DOCS)
def test_every_named_test_file_exists(doc):
    """Test files moved into tests/core/<group>/: the pages follow them."""
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        named = set(re.findall(r"\btests/[\w/]+\.py\b", f.read()))
    assert sorted(p for p in named if not os.path.exists(os.path.join(ROOT, p))) == []


def test_every_quality_bar_the_code_cites_is_in_docs_quality_md():
    """The code and the tests cite the bars of docs/quality.md by id ("docs/quality.md
    P9", "R8 and R10 of docs/quality.md"): each id cited there is one of its rows."""
    with open(os.path.join(ROOT, "docs", "quality.md"), encoding="utf-8") as f:
        defined = set(re.findall(r"^\| ([PRS]\d+) \|", f.read(), re.M))
    assert {"P1", "P9", "R1", "R5", "R20", "S1", "S12"} <= defined
    cited = {}
    for path in repository_text_files():
        if not path.endswith(".py"):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for sentence in re.split(r"(?<=[.;:)])\s", text):
            if "quality.md" in sentence:
                for bar in re.findall(r"\b([PRS]\d+)\b", sentence):
                    cited.setdefault(bar, os.path.relpath(path, ROOT))
    assert cited, "the code cites its bars"
    assert {bar: path for bar, path in cited.items() if bar not in defined} == {}
