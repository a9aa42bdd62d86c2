"""Every ``goodput`` command that takes a store or an endpoint, found from the
command line's own parser, with an invocation of each (issue 43: the secret
and store-ownership attacks run against all of them).

:func:`store_commands` and :func:`endpoint_commands` read the parser, so a new
command (or a new store argument) shows up there; :data:`INVOCATIONS` must
then name how to run it, or the tests that compare the two fail.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the argument names (dest) that hold a store or a JSONL-or-store spec
_STORE_DESTS = {"store", "source", "dest"}

#: command -> its invocations; placeholders: {store} (the store under test),
#: {tmp} (a fresh directory), {jsonl} (a JSONL file of run "r"), {sacct} (sacct
#: JSON of job 7), {endpoint} (an OTLP endpoint).
INVOCATIONS: Dict[str, List[List[str]]] = {
    "demo": [["demo", "--synthetic", "--store", "{store}", "--run", "d",
              "--outdir", "{tmp}/demo"]],
    "runs": [["runs", "--store", "{store}", "--json"],
             ["runs", "--store", "{store}", "--summary"],
             ["runs", "rename", "r", "r2", "--yes", "--store", "{store}"],
             ["runs", "delete", "r", "--yes", "--store", "{store}"]],
    "events": [["events", "r", "--store", "{store}"]],
    "monitor": [["monitor", "r", "--store", "{store}", "--once"]],
    "report": [["report", "r", "--store", "{store}", "--json"],
               ["report", "r", "--store", "{store}"]],
    "compare": [["compare", "r", "--store", "{store}", "--json"]],
    "timeline": [["timeline", "r", "--store", "{store}", "-o", "{tmp}/t.html"]],
    "export": [["export", "r", "--store", "{store}", "-o", "{tmp}/e.jsonl"]],
    "import": [["import", "r", "--from", "{store}", "--to", "{tmp}/i.jsonl"],
               ["import", "r", "--from", "{jsonl}", "--to", "{store}"]],
    "backup": [["backup", "{store}", "{tmp}/b.sqlite"]],
    "compact": [["compact", "{store}"]],
    "incidents": [["incidents", "r", "--store", "{store}", "--json"]],
    "project": [["project", "r", "--store", "{store}", "--json"]],
    "import-scheduler": [["import-scheduler", "slurm", "7", "--run", "r", "--store", "{store}",
                          "--input", "{sacct}"]],
    "serve": [["serve", "--store", "{store}", "--port", "0"]],
}
#: command -> its invocations with an OTLP endpoint ({endpoint}); the store is a
#: good one ({good}).
ENDPOINT_INVOCATIONS: Dict[str, List[List[str]]] = {
    "export": [["export", "r", "--store", "{good}", "--format", "otlp",
                "--endpoint", "{endpoint}"]],
    "monitor": [["monitor", "r", "--store", "{good}", "--once", "--otel",
                 "--otel-endpoint", "{endpoint}"],
                ["monitor", "r", "--store", "{good}", "--once", "--otel", "traces",
                 "--otel-endpoint", "{endpoint}"]],
}


def _subparsers():
    import argparse

    from goodput_core.cli import build_parser

    parser = build_parser()
    for action in parser._actions:  # argparse keeps its subcommands here
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    raise AssertionError("the goodput parser has no subcommands")


def store_commands() -> Set[str]:
    """The commands with an argument that names a store."""
    return {name for name, sub in _subparsers().items()
            if any(a.dest in _STORE_DESTS for a in sub._actions)}


def endpoint_commands() -> Set[str]:
    """The commands with an option that names an endpoint (``--...endpoint``)."""
    return {name for name, sub in _subparsers().items()
            if any(s.endswith("endpoint") for a in sub._actions for s in a.option_strings)}


def env(tmp: str, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment of a child: this checkout first, data and cache dirs
    (stores, spill files) under ``tmp``, no inherited store or OTLP settings."""
    out = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "GOODPUT_", "PG"))}
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [_REPO, os.environ.get("PYTHONPATH")]))
    out["XDG_DATA_HOME"] = os.path.join(tmp, "data")
    out["XDG_CACHE_HOME"] = os.path.join(tmp, "cache")
    out["HOME"] = tmp
    out.update(extra or {})
    return out


def fill(argv: Sequence[str], **values: str) -> List[str]:
    return [a.format(**values) for a in argv]


def run(argv: Sequence[str], environ: Mapping[str, str], cwd: str,
        timeout: float = 120) -> Tuple[int, str, str]:
    """``goodput ARGV`` in a subprocess: (exit code, stdout, stderr). ``serve``
    is stopped once it said where it listens (or when it exits)."""
    cmd = [sys.executable, "-m", "goodput_core.cli", *argv]
    if argv[0] != "serve":
        p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                           env=dict(environ), cwd=cwd, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL, env=dict(environ), cwd=cwd)
    lines: "queue.Queue[str]" = queue.Queue()
    reader = threading.Thread(target=lambda: lines.put(p.stdout.readline()), daemon=True)
    reader.start()
    try:
        try:
            first = lines.get(timeout=timeout)  # its first line, or '' when it exits
        except queue.Empty:
            first = ""
        if p.poll() is None:
            p.terminate()
        reader.join(timeout)
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, first + out, err


def run_here(argv: Sequence[str], capsys) -> Tuple[int, str, str]:
    """``goodput ARGV`` in this process (:func:`goodput_core.cli.main`, what the
    ``goodput`` script calls), output taken by pytest's ``capsys``: for the many
    runs whose first step is a refusal (a subprocess each would cost seconds)."""
    from goodput_core.cli import main

    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def run_all(argvs: Iterable[Sequence[str]], environ: Mapping[str, str], cwd: str,
            workers: int = 4) -> List[Tuple[List[str], int, str, str]]:
    """:func:`run` of each, a few at a time; results in the given order."""
    argvs = [list(a) for a in argvs]
    with ThreadPoolExecutor(workers) as pool:
        done = list(pool.map(lambda a: run(a, environ, cwd), argvs))
    return [(a, *r) for a, r in zip(argvs, done)]


def write_inputs(tmp: str) -> Dict[str, str]:
    """A JSONL file of run ``r`` and sacct JSON of job 7; their paths by placeholder."""
    from goodput_core.cli.commands.transfer import dumps_line
    from tests.support.cli_process import synthetic_job_events

    os.makedirs(tmp, exist_ok=True)
    jsonl = os.path.join(tmp, "r.jsonl")
    with open(jsonl, "w") as f:
        f.writelines(dumps_line(e, True) for e in synthetic_job_events("r"))
    sacct = os.path.join(tmp, "sacct.json")
    with open(sacct, "w") as f:
        json.dump({"jobs": [{"job_id": 7, "time": {"submission": 1_699_999_000,
                                                   "start": 1_699_999_900}}]}, f)
    return {"jsonl": jsonl, "sacct": sacct}


def files_under(root: str) -> List[str]:
    """Every regular file below ``root``."""
    return [os.path.join(d, f) for d, _, names in os.walk(root) for f in names
            if os.path.isfile(os.path.join(d, f))]
