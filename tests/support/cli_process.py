"""Running the ``goodput`` command in a real subprocess, optionally as an
unprivileged user (what a user who may read a store but not write it sees),
and the events of a run to put in the stores it reads."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Optional, Sequence

NOBODY = 65534
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def as_nobody_prefix() -> Optional[list]:
    """The command prefix that runs a child as ``nobody`` (root only), or None
    when this machine cannot (not root, no setpriv, or nobody cannot run this
    Python)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("setpriv"):
        return None
    prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    probe = subprocess.run(prefix + [sys.executable, "-c", "import numpy, goodput_core"],
                           capture_output=True, cwd="/", env=_env(), timeout=120)
    return prefix if probe.returncode == 0 else None


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_REPO, env.get("PYTHONPATH")]))
    env.pop("GOODPUT_STORE", None)
    return env


def goodput(*argv: str, prefix: Sequence[str] = (), cwd: str = "/",
            timeout: float = 300) -> subprocess.CompletedProcess:
    """Runs ``goodput ARGV...`` (``python -m goodput_core.cli``) and returns its result."""
    return subprocess.run(list(prefix) + [sys.executable, "-m", "goodput_core.cli", *argv],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          cwd=cwd, env=_env(), timeout=timeout)


def synthetic_job_events(run: str):
    """The events of :mod:`goodput_core.synthetic`'s default job (a crash and a
    restart) as the recorder writes them, in write order."""
    from goodput_core.recorder import Recorder
    from goodput_core.stores.memory import MemoryStore
    from goodput_core.synthetic import record_synthetic_job

    mem = MemoryStore(f"synthetic-{run}")
    rec = Recorder(run, mem)
    record_synthetic_job(rec, 1_700_000_000.0)
    rec.close()
    return mem.read(run)[0]
