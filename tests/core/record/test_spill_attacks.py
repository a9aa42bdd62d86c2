"""docs/quality.md R19, R20: spill files and journals that are corrupt, poisoned or
planted by another user, and a full queue (issue 42: D10, D14, D15, D16).

* D10: a spill directory another user owns or may write (or a symlink to
  one) is refused with one error line: nothing planted there is delivered,
  and the recorder keeps its events in memory (said in ``stats()``).
* D14: a delivery offset (``.pos``) that does not fit its file is ignored:
  the file is delivered from its start (the store keeps each event once).
* D15: a spilled line the store cannot take is set aside in a ``.rejected``
  file, counted and said once, and never stops the rest.
* D16: a full queue drops nothing silently: ``flush()`` returns False,
  ``stats()`` counts the drops, and stderr says it at the time and at exit.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from goodput_core import Recorder
from goodput_core.events import EventRecord, Kind
from goodput_core.record.spill import Outbox
from goodput_core.stores.sqlite import SqliteStore
from tests.support.cli_process import NOBODY

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _steps(run, n, attempt="w1", first=0):
    return [EventRecord(run, int(Kind.STEP_START), 1000.0 + i, i, None, 0, "h", 1, attempt,
                        i + 1, 1000.0 + i) for i in range(first, first + n)]


def _forged(run, n):
    return [EventRecord(run, int(Kind.DISRUPTION), 2000.0 + i, None,
                        {"disruption_cause": "forged"}, 0, "evil", 666, "forged", i + 1, 2000.0)
            for i in range(n)]


def _plant(directory, url, events):
    """A spill file for ``url`` in ``directory``, as a writer that died would leave it."""
    os.makedirs(directory, exist_ok=True)
    outbox = Outbox(url, directory=str(directory))
    outbox.put(events)
    left, path = outbox.close()
    assert left == len(events)
    return path


def _left_behind(tmp_path, monkeypatch, events):
    """A store and, in this test's spill directory, a file of ``events`` a dead
    writer left for it; returns (spill directory, store path, URL, file)."""
    spill = tmp_path / "spill"
    monkeypatch.setenv("GOODPUT_SPILL_DIR", str(spill))
    path = str(tmp_path / "s.sqlite")
    url = "sqlite:///" + path.lstrip("/")
    return spill, path, url, _plant(spill, url, events)


def _kinds(path, run):
    return [e.kind for e in SqliteStore(path).read(run)[0]]


# ------------------------------------------------------------------ D10
@pytest.mark.parametrize("how", ["world-writable", "symlink", "another-user"])
def test_d10_a_spill_directory_others_control_is_refused(tmp_path, monkeypatch, caplog, how):
    if how == "another-user" and os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    path = str(tmp_path / "s.sqlite")
    url = "sqlite:///" + path.lstrip("/")
    theirs = tmp_path / "theirs"
    planted = _plant(theirs, url, _forged("victim", 50))
    if how == "another-user":
        for p in (theirs, planted):
            os.chown(p, NOBODY, NOBODY)
    else:
        os.chmod(theirs, 0o777)  # what another local user made for everyone
    spill = theirs
    if how == "symlink":
        spill = tmp_path / "mine"
        os.symlink(theirs, spill)
    monkeypatch.setenv("GOODPUT_SPILL_DIR", str(spill))
    caplog.set_level(logging.ERROR, logger="goodput")
    rec = Recorder("victim", url)
    for k in range(10):
        rec.record_step_start_time(k, 1000.0 + k)
    assert rec.flush(30)
    stats = rec.stats()
    rec.close()
    assert _kinds(path, "victim") == [int(Kind.STEP_START)] * 10  # no forged disruption
    assert os.path.exists(planted)  # not taken, not deleted
    # no journal there: the events waited in memory, and that was said
    assert stats["journal"] is None and "refused the spill directory" in stats["journal_error"]
    said = [r.getMessage() for r in caplog.records if "refused the spill directory" in
            r.getMessage()]
    assert said and all("\n" not in line for line in said)


def test_d10_the_spill_directory_is_created_private(tmp_path, monkeypatch):
    spill = tmp_path / "new" / "spill"
    monkeypatch.setenv("GOODPUT_SPILL_DIR", str(spill))
    rec = Recorder("r", str(tmp_path / "s.sqlite"))
    rec.record_job_start_time()
    assert stat.S_IMODE(os.stat(spill).st_mode) == 0o700
    journal = rec.stats()["journal"]
    assert os.path.dirname(journal) == str(spill)
    assert stat.S_IMODE(os.stat(journal).st_mode) == 0o600
    assert rec.close(30)


# ------------------------------------------------------------------ D14
@pytest.mark.parametrize("offset", ["past-the-end", "mid-line"])
def test_d14_an_offset_that_does_not_fit_its_file_is_ignored(tmp_path, monkeypatch, offset):
    spill, path, url, planted = _left_behind(tmp_path, monkeypatch, _steps("left", 2002))
    size = os.path.getsize(planted)
    with open(planted + ".pos", "w") as f:
        f.write("%020d\n" % (size * 1000 if offset == "past-the-end" else size // 2 + 3))
    rec = Recorder("next", url)
    assert rec.flush(30)
    rec.close()
    assert [e.step for e in SqliteStore(path).read("left")[0]] == list(range(2002))
    assert os.listdir(spill) == []


# ------------------------------------------------------------------ D15
def test_d15_a_spilled_line_the_store_cannot_take_is_set_aside(tmp_path, monkeypatch, caplog):
    spill, path, url, planted = _left_behind(tmp_path, monkeypatch, _steps("left", 10))
    with open(planted) as f:
        lines = f.read().splitlines()
    bad = json.loads(lines[4])
    bad["e"][2] = {"an object": "where a time should be"}
    lines[4] = json.dumps(bad)
    with open(planted, "w") as f:
        f.write("\n".join(lines) + "\n")
    caplog.set_level(logging.ERROR, logger="goodput")
    for attempt in range(2):  # and every later process stores its own events
        rec = Recorder(f"own-{attempt}", url)
        for k in range(5):
            rec.record_step_start_time(k, 3000.0 + k)
        assert rec.flush(30)
        stats = rec.stats()
        rec.close()
        assert (stats["written"], stats["spilled"]) == (5 + (9 if attempt == 0 else 0), 0)
        assert [e.step for e in SqliteStore(path).read(f"own-{attempt}")[0]] == list(range(5))
    assert [e.step for e in SqliteStore(path).read("left")[0]] == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    rejected = [n for n in os.listdir(spill) if n.endswith(".rejected")]
    assert len(rejected) == 1
    assert [json.loads(x) for x in open(spill / rejected[0]).read().splitlines()] == [bad]
    said = [r for r in caplog.records if "set aside" in r.getMessage()]
    assert len(said) == 1 and "rejected" in said[0].getMessage()


# ------------------------------------------------------------------ D16
_FULL_QUEUE = textwrap.dedent("""
    import json, sys, threading
    from goodput_core import Recorder
    from goodput_core.stores.sqlite import SqliteStore

    gate = threading.Event()

    class Slow(SqliteStore):
        def append(self, batch):
            gate.wait(60)  # the writer is held up while the loop records
            super().append(batch)

    store = Slow(sys.argv[1])
    rec = Recorder("burst", store, queue_size=1000, durable=sys.argv[2] == "1")
    rec.record_job_start_time()
    for k in range(3001):
        rec.record_step_start_time(k)
    gate.set()
    ok = rec.flush(60)
    sys.stderr.write("FLUSHED\\n")
    print(json.dumps({"flush": ok, "stats": rec.stats()}), flush=True)
""")


@pytest.mark.parametrize("durable", [True, False])
def test_d16_a_full_queue_drops_nothing_silently(tmp_path, durable):
    proc = subprocess.run([sys.executable, "-c", _FULL_QUEUE, str(tmp_path / "s.sqlite"),
                           "1" if durable else "0"], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, GOODPUT_SPILL_DIR=str(tmp_path / "spill")),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    stored = SqliteStore(str(tmp_path / "s.sqlite")).read("burst")[0]
    dropped = out["stats"]["dropped"]
    assert out["flush"] is False and dropped > 0
    assert len(stored) + dropped == 3002  # every event stored or counted
    at_the_time, at_exit = proc.stderr.split("FLUSHED\n")
    for said in (at_the_time, at_exit):  # one line each
        lines = [line for line in said.splitlines() if "dropped" in line]
        assert len(lines) == 1 and "queue_size=1000" in lines[0], proc.stderr
    assert f"{dropped} events dropped" in at_exit
