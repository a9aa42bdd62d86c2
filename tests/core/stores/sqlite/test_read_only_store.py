"""R10: a store the user may read but not write is read by every read-only
command (``runs``, ``report``, ``events``, ``timeline``, ``export``,
``monitor``, ``import --from``).

The tests run as root here, which no file mode stops; so the commands run in
a subprocess as ``nobody`` (setpriv) against a store owned by root, mode 0644,
in a directory nobody may not write: once with the store closed (no ``-wal``
or ``-shm`` file, so SQLite cannot set up its WAL index) and once while a
writer holds it open with events still in the WAL. Where the tests do not run
as root, the same reads run in-process against a 0444 file in a 0555 directory.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

from goodput_core.events import Kind
from goodput_core.stores import open_store
from goodput_core.stores.sqlite import SqliteStore
from tests.support.cli_process import as_nobody_prefix, goodput, synthetic_job_events

RUN = "job"


def _job_events():
    return synthetic_job_events(RUN)


@pytest.fixture(scope="module")
def nobody():
    prefix = as_nobody_prefix()
    if prefix is None:
        pytest.skip("needs root and setpriv to run a command as an unprivileged user")
    return prefix


@pytest.fixture
def shared_dir():
    """A root-owned directory others may enter but not write, and one they may write."""
    base = tempfile.mkdtemp(prefix="goodput-r10-")
    os.chmod(base, 0o755)
    store_dir, out_dir = os.path.join(base, "store"), os.path.join(base, "out")
    os.mkdir(store_dir)
    os.mkdir(out_dir)
    os.chmod(store_dir, 0o755)
    os.chmod(out_dir, 0o777)
    yield store_dir, out_dir
    shutil.rmtree(base)


def _read_every_way(prefix, path, out_dir, n_events):
    """Runs every read-only command as the given user; each must succeed."""
    def ok(*argv):
        result = goodput(*argv, prefix=prefix)
        assert result.returncode == 0, (argv, result.stderr)
        assert "Traceback" not in result.stderr
        return result

    assert ok("runs", "--store", path).stdout.split() == [RUN]
    report = json.loads(ok("report", RUN, "--store", path, "--json").stdout)
    assert report["total_seconds"] > 0 and report["disruptions"] == 1
    assert len(ok("events", RUN, "--store", path).stdout.splitlines()) == n_events
    export = os.path.join(out_dir, "e.jsonl")
    ok("export", RUN, "--store", path, "-o", export)
    with open(export) as f:
        assert len(f.read().splitlines()) == n_events
    imported = os.path.join(out_dir, "i.jsonl")
    ok("import", RUN, "--from", path, "--to", imported)
    with open(imported) as f:
        assert len(f.read().splitlines()) == n_events
    ok("timeline", RUN, "--store", path, "-o", os.path.join(out_dir, "t.html"))
    assert "goodput" in ok("monitor", RUN, "--store", path, "--once").stdout.lower()
    return report


def test_r10_read_only_commands_read_a_closed_store_they_cannot_write(nobody, shared_dir):
    store_dir, out_dir = shared_dir
    path = os.path.join(store_dir, "goodput.sqlite")
    events = _job_events()
    s = SqliteStore(path)
    s.append(events)
    s.close()
    os.chmod(path, 0o644)
    assert not any(os.path.exists(path + x) for x in ("-wal", "-shm"))
    _read_every_way(nobody, path, out_dir, len(events))
    assert os.listdir(store_dir) == ["goodput.sqlite"]  # nothing written beside it
    # without read access it is still a clean one-line error
    os.chmod(path, 0o600)
    denied = goodput("report", RUN, "--store", path, prefix=nobody)
    assert denied.returncode != 0 and "Traceback" not in denied.stderr
    assert path in denied.stderr


def test_r10_read_only_commands_see_events_a_live_writer_has_in_the_wal(nobody, shared_dir):
    store_dir, out_dir = shared_dir
    path = os.path.join(store_dir, "goodput.sqlite")
    events = _job_events()
    writer = SqliteStore(path)
    writer.append(events[:10])
    writer.append(events[10:])  # still open: these pages sit in the -wal file
    try:
        assert os.path.getsize(path + "-wal") > 0
        for suffix in ("", "-wal", "-shm"):
            os.chmod(path + suffix, 0o644)
        report = _read_every_way(nobody, path, out_dir, len(events))
        assert report["last_step"] == max(e.step for e in events if e.kind == Kind.STEP_START)
    finally:
        writer.close()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="file modes do not stop root (the setpriv tests cover it)")
def test_r10_read_only_file_and_directory_are_read_in_process(tmp_path):
    path = tmp_path / "ro" / "goodput.sqlite"
    events = _job_events()
    s = SqliteStore(path)
    s.append(events)
    s.close()
    path.chmod(0o444)
    path.parent.chmod(0o555)
    try:
        store = open_store(str(path), create=False)
        assert store.runs() == [RUN]
        assert len(store.read(RUN)[0]) == len(events)
    finally:
        path.parent.chmod(0o755)
