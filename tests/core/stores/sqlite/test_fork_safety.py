"""No SQLite connection crosses ``os.fork()``, and child waits are bounded.

Mutation killed: ``stores/sqlite/fork.py`` not closing the connections before a
fork (``connections.close_all()`` removed) ->
``test_no_sqlite_file_is_open_in_a_forked_child``.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from goodput_core.events import EventRecord, Kind
from goodput_core.stores.sqlite import SqliteStore
from tests.support.children import wait_child

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not os.path.isdir("/proc/self/fd"),
                                reason="needs os.fork and /proc/self/fd (Linux)")


def _event(seq, attempt="main"):
    return EventRecord("run", int(Kind.STEP_START), float(seq), seq, None, 0, "host",
                       os.getpid(), attempt, seq, 0.0)


def _open_store_files(path):
    """The store's files (database, -wal, -shm) this process has open."""
    names = {path, path + "-wal", path + "-shm"}
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the fd of the listing itself, closed by now
            continue
        if target in names:
            found.append(target)
    return found


def test_no_sqlite_file_is_open_in_a_forked_child(tmp_path):
    store = SqliteStore(tmp_path / "s.sqlite")
    store.append([_event(0)])
    worker = threading.Thread(target=lambda: store.append([_event(0, "thread")]))
    worker.start()
    worker.join(30)
    assert not worker.is_alive()
    # the parent holds connections (this thread's and the ended thread's):
    # the check below can see them when they are there
    assert store.path in _open_store_files(store.path)
    pid = os.fork()
    if pid == 0:  # the child looks before touching the store
        os._exit(0 if not _open_store_files(store.path) else 3)
    assert wait_child(pid, 60, "child listing its open files") == 0, \
        "a SQLite connection of the parent was inherited by the child"
    store.append([_event(1)])  # the parent reopens on use
    assert [e.seq for e in store.read("run")[0] if e.attempt == "main"] == [0, 1]
    store.close()


def test_a_hung_child_fails_clearly_and_is_reaped():
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child waits until it is killed
        while True:
            signal.pause()
    with pytest.raises(pytest.fail.Exception, match=rf"hanging child \(pid {pid}\).*killed"):
        wait_child(pid, 0.05, "hanging child")
    with pytest.raises(ChildProcessError):  # already reaped: no zombie left behind
        os.waitpid(pid, os.WNOHANG)


def test_the_exit_code_of_a_child_is_returned():
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    assert wait_child(pid, 60) == 7
