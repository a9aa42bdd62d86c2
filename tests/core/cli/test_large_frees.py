"""``goodput report`` gives freed large arrays back to the system (glibc's mmap
threshold fixed at 4 MiB, ``cli/large_frees.py``), measured in a real process:
after a 30 MiB array is freed, glibc's default would serve a 20 MiB one from
its heap and keep it resident once freed.
"""

import os
import subprocess
import sys

import pytest

_PROBE = r"""
import sys
import numpy as np
from goodput_core.cli.large_frees import release_large_frees

def rss_mib():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024

if sys.argv[1] == "on":
    assert release_large_frees()
a = np.ones(30 << 17)  # 30 MiB, freed: glibc raises its threshold to its size
del a
before = rss_mib()
b = np.ones(20 << 17)  # 20 MiB, written
del b
print(rss_mib() - before)
"""

_GLIBC = (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc") \
    if hasattr(os, "confstr") else False


def _kept_mib(mode: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}  # the defaults
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True,
                         check=True, env=env)
    return float(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _GLIBC, reason="glibc only")
def test_a_freed_large_array_leaves_the_resident_memory():
    assert _kept_mib("off") > 15  # glibc's default: the 20 MiB stay resident
    assert _kept_mib("on") < 3


def test_the_report_command_sets_it(monkeypatch):
    from goodput_core.cli.commands import report
    from goodput_core.stores.base import StoreError

    calls = []
    monkeypatch.setattr(report, "release_large_frees", lambda: calls.append(1))
    with pytest.raises(StoreError):  # (no such store: the setting comes first)
        report.run(type("Args", (), {"run": "x", "store": "/nonexistent/x.sqlite",
                                     "window": None, "exclude": [], "json": False})())
    assert calls == [1]
