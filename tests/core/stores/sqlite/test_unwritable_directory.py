"""A store in a directory the user may not write: a clear error, as any user.

Root may write anywhere, so under root the check runs in a subprocess as an
unprivileged user (``setpriv``, else ``runuser``; both are util-linux).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from goodput_core.stores import StoreError
from goodput_core.stores.sqlite import SqliteStore


_OPEN_AS = textwrap.dedent("""
    import sys
    from goodput_core.stores import StoreError
    from goodput_core.stores.sqlite import SqliteStore
    try:
        SqliteStore(sys.argv[1])
    except StoreError as exc:
        print("StoreError:", exc)
    else:
        print("opened")
""")


def test_unwritable_directory_raises_store_error(tmp_path):
    if os.geteuid() != 0:
        locked = tmp_path / "ro"
        locked.mkdir()
        locked.chmod(0o500)
        try:
            with pytest.raises(StoreError, match="directory .* is not writable"):
                SqliteStore(locked / "s.sqlite")
        finally:
            locked.chmod(0o700)
        return
    # root may write anywhere: open it as an unprivileged user instead
    drop = (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            if shutil.which("setpriv") else ["runuser", "-u", "nobody", "--"])
    assert shutil.which(drop[0]), "running as root needs setpriv or runuser (util-linux)"
    base = tempfile.mkdtemp(prefix="goodput-unprivileged-")  # tmp_path's parents are 0700
    try:
        os.chmod(base, 0o755)
        locked = os.path.join(base, "ro")
        os.mkdir(locked)
        os.chmod(locked, 0o555)  # the user may enter and read, not write
        proc = subprocess.run([*drop, sys.executable, "-c", _OPEN_AS,
                               os.path.join(locked, "s.sqlite")],
                              capture_output=True, text=True, timeout=120, cwd=base)
    finally:
        shutil.rmtree(base)
    assert proc.returncode == 0, proc.stderr
    # the directory check names the cause (the hint at the end of every
    # store error says "writable" too: not enough)
    assert proc.stdout.startswith("StoreError:"), proc.stdout
    assert f"the directory {locked!r} is not writable" in proc.stdout, proc.stdout
