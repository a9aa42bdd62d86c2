"""Run only by ``tests/core/test_suite_hygiene.py``, in a pytest of its own
whose HOME is a fresh directory (the file name keeps it out of normal
collection). It does what once wrote into the user's real data directory:
an environment copied when the test module is imported, then a child process
started with it that writes to the default store and profile directory."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHILD_ENV = dict(os.environ, PYTHONPATH=ROOT)  # copied at import time, as test modules do

_CHILD = """
import os
from goodput_core import Recorder
from goodput_core.compat.mldiagnostics.mlrun import _profile_dir
rec = Recorder("home-probe", hang_detection=False)   # the default store
rec.record_job_start_time()
rec.close()
d = _profile_dir(None, None, "home-probe")             # the default profile directory
os.makedirs(d, exist_ok=True)
open(os.path.join(d, "trace.json"), "w").close()
"""


def test_a_child_started_with_an_import_time_environment():
    subprocess.run([sys.executable, "-c", _CHILD], env=CHILD_ENV, check=True, timeout=120,
                   stdin=subprocess.DEVNULL)


def test_the_default_store_in_process():
    from goodput_core import Recorder

    rec = Recorder("home-probe-in", hang_detection=False)
    rec.record_job_start_time()
    assert rec.close()
