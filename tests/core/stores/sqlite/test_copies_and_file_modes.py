"""R15 and the files the tool writes.

* A copy (``cp``) of the embedded store after a clean close or a plain
  interpreter exit reads every run: the write-ahead log was folded into the
  file. ``goodput backup`` while 4 processes write holds every event they
  had committed before it started, and for each writer an unbroken prefix of
  its events (one snapshot).
* ``goodput compact``, ``runs delete`` and ``runs rename`` (asked on a real
  pseudo-terminal; refused without one unless ``--yes``).
* Every output is 0600 and replaces its path atomically: a symlink planted
  there is replaced, never followed; a dangling symlink at the store path is
  refused (SQLite would create its target).
* A reader checks the store's format marker at every read.
"""

from __future__ import annotations

import os
import pty
import shutil
import sqlite3
import stat
import subprocess
import sys
import textwrap

import pytest

from goodput_core import Recorder
from goodput_core.cli import main
from goodput_core.cli.synthetic import record_synthetic_job
from goodput_core.stores import StoreError
from goodput_core.stores.sqlite import SqliteStore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
START = 1_700_000_000.0


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    return env


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _steps(path, run):
    store = SqliteStore(path, readonly=True)
    try:
        return sorted(e.step for e in store.read(run)[0])
    finally:
        store.close()


_EXIT_WRITER = textwrap.dedent("""
    import sys
    from goodput_core import Recorder
    for run in ("r1", "r2", "r3"):
        rec = Recorder(run, sys.argv[1])
        for i in range(4000):
            rec.record_step_start_time(i, 1000.0 + i)
    # no flush, no close: the interpreter's exit stores and checkpoints
""")


def test_a_copy_after_a_plain_exit_reads_every_run(tmp_path):
    store = tmp_path / "goodput.sqlite"
    subprocess.run([sys.executable, "-c", _EXIT_WRITER, str(store)], check=True,
                   env=_env(), timeout=120, cwd=ROOT)
    wal = tmp_path / "goodput.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0  # folded into the file
    copy = tmp_path / "copy" / "x.sqlite"
    copy.parent.mkdir()
    shutil.copyfile(store, copy)  # the file alone, as cp does
    for run in ("r1", "r2", "r3"):
        assert _steps(copy, run) == list(range(4000))


def test_a_copy_after_a_clean_close_reads_every_run(tmp_path):
    store = tmp_path / "s.sqlite"
    rec = Recorder("closed", str(store))
    for i in range(3000):
        rec.record_step_start_time(i, 1000.0 + i)
    assert rec.close(30)
    copy = tmp_path / "c.sqlite"
    shutil.copyfile(store, copy)
    assert _steps(copy, "closed") == list(range(3000))


_LOOP_WRITER = textwrap.dedent("""
    import os, sys
    from goodput_core import Recorder
    store, run, stop = sys.argv[1], sys.argv[2], sys.argv[3]
    rec = Recorder(run, store, flush_interval_s=0.02)
    i = 0
    while not os.path.exists(stop) and i < 2_000_000:
        for _ in range(200):
            rec.record_step_start_time(i, 1000.0 + i)
            i += 1
        assert rec.flush(60)
        print(i, flush=True)  # events 0..i-1 are committed
""")


def test_backup_while_four_processes_write_holds_every_committed_event(tmp_path):
    store, stop, dest = tmp_path / "live.sqlite", tmp_path / "stop", tmp_path / "b.sqlite"
    SqliteStore(store).close()  # created once, before the writers race
    writers = [subprocess.Popen([sys.executable, "-c", _LOOP_WRITER, str(store), f"w{k}",
                                 str(stop)], stdout=subprocess.PIPE, text=True, env=_env(),
                                cwd=ROOT) for k in range(4)]
    try:
        # each writer has committed some events (it says how many after each flush)
        committed = [int(w.stdout.readline()) for w in writers]
        assert main(["backup", str(store), str(dest)]) == 0
    finally:
        stop.touch()
        for w in writers:
            w.stdout.read()
            w.wait(timeout=120)
    assert [w.returncode for w in writers] == [0, 0, 0, 0]
    assert _mode(dest) == 0o600
    assert not os.path.exists(str(dest) + "-wal")  # one self-contained file
    backup = SqliteStore(dest, readonly=True)
    assert backup.integrity_check()
    for k, before in enumerate(committed):
        steps = sorted(e.step for e in backup.read(f"w{k}")[0])
        # everything committed before the backup started, then an unbroken
        # prefix: a snapshot holds no batch in part and skips none
        assert len(steps) >= before
        assert steps == list(range(len(steps)))
    backup.close()


@pytest.fixture
def two_runs(tmp_path):
    path = tmp_path / "m.sqlite"
    for run, n in (("keep", 10), ("old", 25)):
        rec = Recorder(run, str(path))
        for i in range(n):
            rec.record_step_start_time(i, 1000.0 + i)
        assert rec.close(30)
    return path


def _cli(*argv, stdin=subprocess.DEVNULL):
    return subprocess.run([sys.executable, "-m", "goodput_core.cli", *argv], stdin=stdin,
                          capture_output=True, text=True, env=_env(), timeout=120, cwd=ROOT)


def _cli_on_a_terminal(answer: str, *argv):
    """Runs the CLI with a pseudo-terminal as stdin and types ``answer``."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "goodput_core.cli", *argv], stdin=slave,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=_env(), cwd=ROOT)
        os.write(master, answer.encode() + b"\n")
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(master)
        os.close(slave)
    return proc.returncode, err


def test_runs_delete_asks_and_refuses_without_a_terminal(two_runs):
    store = str(two_runs)
    proc = _cli("runs", "delete", "old", "--store", store)
    assert proc.returncode == 2 and "--yes" in proc.stderr
    assert _steps(two_runs, "old") == list(range(25))  # untouched
    code, err = _cli_on_a_terminal("n", "runs", "delete", "old", "--store", store)
    assert code == 1 and "25 events" in err and "nothing deleted" in err
    assert _steps(two_runs, "old") == list(range(25))
    code, err = _cli_on_a_terminal("y", "runs", "delete", "old", "--store", store)
    assert code == 0, err
    assert SqliteStore(store, readonly=True).runs() == ["keep"]
    assert _steps(two_runs, "keep") == list(range(10))
    assert _cli("runs", "delete", "old", "--store", store, "--yes").returncode == 2  # gone


def test_runs_rename_with_yes_and_a_taken_name(two_runs):
    store = str(two_runs)
    proc = _cli("runs", "rename", "old", "keep", "--store", store, "--yes")
    assert proc.returncode == 2 and "exists already" in proc.stderr
    assert _cli("runs", "rename", "old", "new", "--store", store, "--yes").returncode == 0
    assert SqliteStore(store, readonly=True).runs() == ["keep", "new"]
    assert _steps(two_runs, "new") == list(range(25))


def test_compact_keeps_every_event_and_leaves_one_file(tmp_path):
    path = tmp_path / "big.sqlite"
    rec = Recorder("big", str(path))
    for i in range(20_000):  # more than two chunks of rows
        rec.record_step_start_time(i, 1000.0 + i)
    assert rec.flush(60)
    assert main(["compact", str(path)]) == 0
    assert _steps(path, "big") == list(range(20_000))
    rec.close()


# ---------------------------------------------------------------- file modes
@pytest.fixture
def syn(tmp_path):
    url = f"sqlite:///{tmp_path / 'syn.sqlite'}"
    rec = Recorder("syn", url)
    record_synthetic_job(rec, START)
    assert rec.close(30)
    return url


@pytest.mark.parametrize("name", ["t.html", "t.png"])
def test_timeline_outputs_are_private_and_a_planted_symlink_is_not_followed(
        tmp_path, syn, name, capsys):
    if name.endswith(".png"):
        pytest.importorskip("matplotlib")
    out = tmp_path / name
    assert main(["timeline", "syn", "--store", syn, "-o", str(out)]) == 0
    assert _mode(out) == 0o600
    victim = tmp_path / "victim"
    victim.write_text("do not touch")
    out.unlink()
    os.symlink(victim, out)  # planted where the output goes
    assert main(["timeline", "syn", "--store", syn, "-o", str(out)]) == 0
    assert victim.read_text() == "do not touch"
    assert not out.is_symlink() and _mode(out) == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_export_and_backup_outputs_are_private(tmp_path, syn):
    out = tmp_path / "e.jsonl"
    assert main(["export", "syn", "--store", syn, "-o", str(out)]) == 0
    assert _mode(out) == 0o600
    dest = tmp_path / "b.sqlite"
    os.symlink(tmp_path / "victim.sqlite", dest)  # dangling, planted
    assert main(["backup", syn, str(dest)]) == 0
    assert not dest.is_symlink() and _mode(dest) == 0o600
    assert not (tmp_path / "victim.sqlite").exists()


def test_an_import_into_a_new_jsonl_file_is_private_and_refuses_a_symlink(tmp_path, syn):
    out = tmp_path / "i.jsonl"
    assert main(["import", "syn", "--from", syn, "--to", str(out)]) == 0
    assert _mode(out) == 0o600
    victim = tmp_path / "victim.jsonl"
    victim.write_text("")
    link = tmp_path / "l.jsonl"
    os.symlink(victim, link)
    assert main(["import", "syn", "--from", syn, "--to", str(link)]) == 1  # cannot write
    assert victim.read_text() == ""


def test_tensorboard_files_are_private(tmp_path):
    pytest.importorskip("tensorboardX")
    from goodput_core.exporters.tensorboard import _EventFile

    writer = _EventFile(str(tmp_path / "tb"))
    writer.add_scalar("goodput", 50.0, 1)
    writer.close()
    (name,) = os.listdir(tmp_path / "tb")
    assert _mode(tmp_path / "tb" / name) == 0o600


def test_a_dangling_symlink_at_the_store_path_is_refused(tmp_path):
    target = tmp_path / "elsewhere" / "target.sqlite"
    target.parent.mkdir()
    link = tmp_path / "s.sqlite"
    os.symlink(target, link)
    with pytest.raises(StoreError, match="symlink to a file that does not exist"):
        SqliteStore(link)
    assert not target.exists()


def test_a_reader_fails_once_a_newer_format_marks_the_file(tmp_path):
    path = tmp_path / "f.sqlite"
    rec = Recorder("f", str(path))
    rec.record_step_start_time(0, 1000.0)
    assert rec.close(30)
    reader = SqliteStore(path, readonly=True)
    assert len(reader.read("f")[0]) == 1  # opened and reading before the upgrade
    with sqlite3.connect(path) as conn:  # what a later format's writer does first
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
        conn.execute("PRAGMA user_version = 3")
    with pytest.raises(StoreError, match="newer goodput"):
        reader.read("f")
    reader.close()
