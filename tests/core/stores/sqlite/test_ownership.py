"""goodput writes only to stores it created (issue 43: X3, X4, X5).

Another application's SQLite database, a store marked newer than this code
understands, and a foreign marker are refused by every command that takes a
store (found from the parser: tests/support/every_command.py) and by the
Recorder (its events spill, the refusal said once), and the file is left
byte for byte as it was. Stores of goodput versions from before the marker
are still read and get the marker from their first writer. ``sqlite://``
query parameters are parsed, never part of a file name. (PostgreSQL:
postgres/test_schema_refusals.py.)
"""

import hashlib
import json
import os
import sqlite3
import subprocess
import sys

import pytest

from goodput_core.stores import StoreError, open_store
from goodput_core.stores.sqlite import ownership
from tests.support import every_command as ec
from tests.support.cli_process import synthetic_job_events


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _store_with_run(path):
    store = open_store(str(path))
    store.append(list(synthetic_job_events("r")))
    store.close()  # checkpointed: the file alone holds everything


def _foreign(path):
    """Another application's database; its meta table even has a schema_version."""
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);"
                       "INSERT INTO users VALUES (1, 'ada');"
                       "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                       "INSERT INTO meta VALUES ('schema_version', '2');")
    conn.close()


def _set(path, *statements):
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in statements:
        conn.execute(statement)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _newer_format(path):
    _store_with_run(path)
    _set(path, "PRAGMA user_version = 99")


def _newer_schema(path):
    _store_with_run(path)
    _set(path, "UPDATE meta SET value = '99' WHERE key = 'schema_version'")


def _foreign_marker(path):
    _store_with_run(path)
    _set(path, "PRAGMA application_id = 305419896")  # 0x12345678


CASES = {"foreign": (_foreign, "is not a goodput store"),
         "foreign marker": (_foreign_marker, "belongs to another application"),
         "newer format": (_newer_format, "was written by a newer goodput"),
         "newer schema": (_newer_schema, "was written by a newer goodput")}
#: how each case names the store: a bare path or a sqlite:// URL (both, across cases)
AS_URL = {"foreign": False, "foreign marker": True, "newer format": True, "newer schema": False}


@pytest.mark.parametrize("command", sorted(ec.INVOCATIONS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_command_refuses_the_file_and_leaves_it_as_it_was(tmp_path, monkeypatch, capsys,
                                                                case, command):
    """In this process (goodput_core.cli.main) for speed: 64 refusals; the
    recorder's below runs in a process of its own."""
    make, said = CASES[case]
    for key, value in ec.env(str(tmp_path)).items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    path = str(tmp_path / "store.sqlite")
    make(path)
    inputs = ec.write_inputs(str(tmp_path / "in"))
    os.makedirs(tmp_path / "out")
    before, listing = _digest(path), sorted(os.listdir(tmp_path))
    store = "sqlite:///" + path.lstrip("/") if AS_URL[case] else path
    argvs = [ec.fill(argv, store=store, tmp=str(tmp_path / "out"), **inputs)
             for argv in ec.INVOCATIONS[command]]
    for argv in argvs:
        code, out, err = ec.run_here(argv, capsys)
        assert code == 2 and said in err, (argv, code, out, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (argv, err)
    assert _digest(path) == before
    # a reader of a WAL-mode store leaves SQLite's index file and an empty log: no write
    left = sorted(f for f in os.listdir(tmp_path) if f != "store.sqlite-shm")
    wal = tmp_path / "store.sqlite-wal"
    assert left in (listing, sorted(listing + [wal.name])) and \
        (not wal.exists() or wal.stat().st_size == 0), left
    assert not os.path.exists(tmp_path / "out" / "b.sqlite")  # no backup of it


def test_every_store_command_is_attacked():
    assert ec.store_commands() == set(ec.INVOCATIONS)


_WRITER = """
import json, sys
from goodput_core import Recorder
rec = Recorder("w", sys.argv[1])
for step in range(5):
    rec.record_step_start_time(step, 1_700_000_000.0 + step)
first = rec.flush(5)
for step in range(5, 8):
    rec.record_step_start_time(step, 1_700_000_000.0 + step)
print(json.dumps({"flush": first, "close": rec.close(5), "stats": rec.stats()}), flush=True)
"""


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_recorder_spills_and_says_it_once(tmp_path, case):
    make, said = CASES[case]
    path = str(tmp_path / "store.sqlite")
    make(path)
    before = _digest(path)
    p = subprocess.run([sys.executable, "-c", _WRITER, path], capture_output=True, text=True,
                       env=ec.env(str(tmp_path)), cwd=str(tmp_path), timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    stats = got["stats"]
    assert got["flush"] is False and got["close"] is False
    assert said in stats["store_error"] and stats["written"] == 0 and stats["dropped"] == 0
    assert stats["spilled_total"] == 8 and os.path.exists(stats["spill_file"])
    assert p.stderr.count(said) == 1, p.stderr  # the refusal said once
    assert _digest(path) == before


def _unmarked(path):
    """A store as goodput wrote it before the marker: the same tables, application id 0."""
    _store_with_run(path)
    _set(path, "PRAGMA application_id = 0")


def _app_id(path):
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA application_id").fetchone()[0]
    finally:
        conn.close()


def test_a_store_from_before_the_marker_is_read_and_marked_by_its_first_writer(tmp_path):
    from goodput_core.record.recorder import Recorder

    path = str(tmp_path / "old.sqlite")
    _unmarked(path)
    reader = open_store(path, create=False)
    assert reader.runs() == ["r"]
    reader.close()
    assert _app_id(path) == 0  # a reader writes nothing
    rec = Recorder("r2", path, strict=True)
    rec.record_job_start_time(1_700_000_000.0)
    assert rec.close(30)
    assert _app_id(path) == ownership.APPLICATION_ID
    # the managing commands mark it too, and a fresh store is marked from its creation
    for argv in (["runs", "rename", "r", "r3", "--yes", "--store", "{p}"], ["compact", "{p}"]):
        other = str(tmp_path / f"{argv[0]}.sqlite")
        _unmarked(other)
        code, _, err = ec.run(ec.fill(argv, p=other), ec.env(str(tmp_path)), str(tmp_path))
        assert code == 0 and _app_id(other) == ownership.APPLICATION_ID, err
    fresh = str(tmp_path / "fresh.sqlite")
    open_store(fresh).close()
    assert _app_id(fresh) == ownership.APPLICATION_ID


def test_vacuum_and_backup_keep_the_marker(tmp_path):
    path = str(tmp_path / "s.sqlite")
    _store_with_run(path)
    env = ec.env(str(tmp_path))
    assert ec.run(["compact", path], env, str(tmp_path))[0] == 0
    assert ec.run(["backup", path, str(tmp_path / "b.sqlite")], env, str(tmp_path))[0] == 0
    assert _app_id(path) == _app_id(str(tmp_path / "b.sqlite")) == ownership.APPLICATION_ID


# ------------------------------------------------------------ sqlite:// parameters (X5)
def test_sqlite_url_parameters_are_parsed_never_part_of_a_file_name(tmp_path):
    from goodput_core.record.recorder import Recorder

    path = str(tmp_path / "p.sqlite")
    _store_with_run(path)
    url = "sqlite:///" + path.lstrip("/")
    env = ec.env(str(tmp_path))
    code, out, err = ec.run(["report", "r", "--store", url + "?mode=ro", "--json"], env,
                            str(tmp_path))
    assert code == 0 and '"store": "' + url + '"' in out, err
    # a writer is refused mode=ro, at its constructor (the API edge)
    with pytest.raises(StoreError, match="mode=ro"):
        Recorder("w", url + "?mode=ro")
    inputs = ec.write_inputs(str(tmp_path / "in"))
    for argv, said in [
            (["import", "r", "--from", inputs["jsonl"], "--to", url + "?mode=ro"], "mode=ro"),
            (["compact", url + "?mode=ro"], "mode=ro"),
            (["runs", "delete", "r", "--yes", "--store", url + "?mode=ro"], "mode=ro"),
            (["report", "r", "--store", url + "?cache=shared"], "'cache=shared' is not"),
            (["report", "r", "--store", url + "?mode=rwc"], "'mode=rwc' is not"),
            (["import", "r", "--from", inputs["jsonl"], "--to",
              f"sqlite:///{tmp_path}/new.sqlite?vfs=unix-none"], "'vfs=unix-none' is not")]:
        code, _, err = ec.run(argv, env, str(tmp_path))
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert not [f for f in os.listdir(tmp_path) if "?" in f or f.startswith("new")]
    assert Recorder("w", url).close(10)  # the plain URL still writes


def test_a_bare_path_is_taken_literally(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = open_store("odd?name.sqlite")
    store.close()
    assert os.path.isfile(tmp_path / "odd?name.sqlite")
