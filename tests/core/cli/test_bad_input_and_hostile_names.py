"""R12 of docs/quality.md and the CLI items of the security list, with the real ``goodput``.

Every subcommand is run as a real process with bad arguments, an unwritable
output and a closed pipe (``| head -0``): each must print exactly one error
line on stderr, exit non-zero and never show a traceback. Then what the
attack found: the demo's ``--run`` as a path, import of lines no store can
hold, export's predictable temporary file, stores created world-readable,
and run names that drive the terminal.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from goodput_core import Recorder, open_store
from goodput_core.cli.synthetic import record_synthetic_job

EVIL = "evil\x1b]0;pwned\x07\x1b[2J\x9b31m"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("r12") / "r12.sqlite")
    for name in ("good", EVIL):
        rec = Recorder(name, path)
        record_synthetic_job(rec, 1_000_000.0)
        rec.record_custom_badput_event_start_time(1_000_001.0, "eval\x1b[31m")
        rec.record_custom_badput_event_end_time(1_000_002.0, "eval\x1b[31m")
        assert rec.close(30)
    return path


def goodput(*argv, stdout=subprocess.PIPE, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "goodput_core.cli", *argv], stdout=stdout,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                          timeout=300, cwd=cwd, env=env)


def assert_one_line_error(proc):
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("goodput"), proc.stderr


def _bad_jsonl(tmp):
    path = os.path.join(tmp, "bad.jsonl")
    with open(path, "w") as f:
        f.write("{not json\n")
    return path


BAD = {
    "no command arguments": lambda db, tmp: ["report"],
    "unknown command": lambda db, tmp: ["bogus"],
    "unknown option": lambda db, tmp: ["runs", "--bogus"],
    "bad int": lambda db, tmp: ["export", "good", "--store", db, "--page-size", "x"],
    "report unknown run": lambda db, tmp: ["report", "nope", "--store", db],
    "report bad window": lambda db, tmp: ["report", "good", "--store", db, "--window", "zz"],
    "report missing store": lambda db, tmp: ["report", "good", "--store", "/nonexistent/x.sqlite"],
    "runs bad url": lambda db, tmp: ["runs", "--store", "nope://x"],
    "events unknown run": lambda db, tmp: ["events", "nope", "--store", db],
    "timeline unwritable": lambda db, tmp: ["timeline", "good", "--store", db, "-o",
                                            os.path.join(db, "t.html")],
    "export unwritable": lambda db, tmp: ["export", "good", "--store", db, "-o",
                                          os.path.join(db, "e.jsonl")],
    "export page size": lambda db, tmp: ["export", "good", "--store", db, "--page-size", "0"],
    "import missing file": lambda db, tmp: ["import", "good", "--from", "/nonexistent.jsonl",
                                            "--to", os.path.join(tmp, "d.sqlite")],
    "import nothing usable": lambda db, tmp: ["import", "good", "--from", _bad_jsonl(tmp),
                                              "--to", os.path.join(tmp, "d.sqlite")],
    "import unwritable": lambda db, tmp: ["import", "good", "--from", db, "--to",
                                          os.path.join(db, "x.jsonl")],
    "monitor unwritable tensorboard": lambda db, tmp: [
        "monitor", "good", "--store", db, "--once", "--quiet", "--tensorboard",
        os.path.join(db, "tb")],
    "monitor bad rolling": lambda db, tmp: ["monitor", "good", "--store", db, "--once",
                                            "--rolling", "x"],
    "demo unwritable outdir": lambda db, tmp: ["demo", "--synthetic", "--outdir",
                                               os.path.join(db, "out")],
    "demo negative steps": lambda db, tmp: ["demo", "--synthetic", "--steps", "-5",
                                            "--outdir", tmp],
    "demo run is a path": lambda db, tmp: ["demo", "--synthetic", "--run", "../../x",
                                           "--outdir", tmp],
    "demo run is absolute": lambda db, tmp: ["demo", "--synthetic", "--run", tmp,
                                             "--outdir", tmp],
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_r12_every_command_with_bad_input_gives_one_line_and_a_non_zero_exit(
        db, tmp_path, case):
    # A path *inside the store file* is unwritable even for root (ENOTDIR).
    proc = goodput(*BAD[case](db, str(tmp_path)))
    assert_one_line_error(proc)
    # README: 1 for an output it cannot write (or an input file it cannot
    # read), 2 for bad arguments, unknown runs and unusable stores
    assert proc.returncode == (1 if "unwritable" in case or "missing file" in case else 2), \
        proc.stderr


CLOSED_PIPE = {
    "runs": lambda db: ["runs", "--store", db],
    "events": lambda db: ["events", "good", "--store", db],
    "report": lambda db: ["report", "good", "--store", db],
    "report json": lambda db: ["report", "good", "--store", db, "--json"],
    "export": lambda db: ["export", "good", "--store", db],
    "import to stdout": lambda db: ["import", "good", "--from", db, "--to", "-"],
    "monitor": lambda db: ["monitor", "good", "--store", db, "--once"],
}


@pytest.mark.parametrize("case", sorted(CLOSED_PIPE))
def test_r12_a_closed_pipe_gives_one_line_and_a_non_zero_exit(db, case):
    read, write = os.pipe()
    os.close(read)  # `| head -0`: the reader is gone before the first write
    try:
        proc = goodput(*CLOSED_PIPE[case](db), stdout=write)
    finally:
        os.close(write)
    assert_one_line_error(proc)
    assert proc.returncode == 141


def test_r12_import_skips_and_reports_exactly_the_lines_no_store_can_hold(tmp_path):
    src = tmp_path / "in.jsonl"
    lines = [{"job_name": "r", "job_start_time": 1.0}]
    lines += [{"job_name": "r", "step_count": i, "step_start_time": 2.0 + i} for i in range(2500)]
    lines.insert(1200, {"job_name": "r", "step_count": 1e19, "step_start_time": 3.0})
    lines.insert(1300, {"job_name": "r", "job_end_time": 9.0,
                        "_writer": {"attempt": "a", "seq": 2 ** 70}})
    text = [json.dumps(line) for line in lines]
    text.insert(2000, "[" * 100_000 + "]" * 100_000)  # nested beyond any parser's limit
    src.write_text("\n".join(text) + "\n")
    dst = str(tmp_path / "out.sqlite")
    proc = goodput("import", "r", "--from", str(src), "--to", dst)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "imported 2501 events" in proc.stdout
    assert ("skipped 3 unusable input lines: 1 not_json (first at line 2001), "
            "2 unstorable (first at line 1201)") in proc.stderr
    events, _ = open_store(dst).read("r")
    assert len(events) == 2501 and sorted(e.step for e in events if e.step is not None) \
        == list(range(2500))


def test_demo_deletes_nothing_a_run_name_points_to(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    outdir = tmp_path / "out" / "deep"
    for name in (str(victim), "../../victim", "..", "a/b", "x\x1b[2J"):
        proc = goodput("demo", "--synthetic", "--outdir", str(outdir), "--run", name)
        assert_one_line_error(proc)
    assert (victim / "precious.txt").read_text() == "keep me"


def test_export_never_follows_a_planted_temporary_file(db, tmp_path):
    out = tmp_path / "export.jsonl"
    target = tmp_path / "elsewhere.txt"
    target.write_text("not yours")
    # Symlinks at every name the old scheme (FILE.tmp-<pid>) could use next.
    for pid in range(os.getpid() - 50, os.getpid() + 20000):
        try:
            os.symlink(target, f"{out}.tmp-{pid}")
        except FileExistsError:
            pass
    proc = goodput("export", "good", "--store", db, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert target.read_text() == "not yours"
    assert not out.is_symlink() and len(out.read_text().splitlines()) > 10
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600


def test_stores_are_created_readable_by_their_owner_only(tmp_path):
    path = tmp_path / "new.sqlite"
    rec = Recorder("r", str(path))
    rec.record_job_start_time(1.0)
    assert rec.close(30)
    for name in os.listdir(tmp_path):  # the file and SQLite's -wal/-shm beside it
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600, name


@pytest.mark.parametrize("argv", [["runs"], ["report", EVIL], ["report", "good"],
                                  ["monitor", "good", "--once"]])
def test_names_from_the_store_are_printed_with_control_characters_escaped(db, argv):
    proc = goodput(*argv[:1], *argv[1:], "--store", db)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout and "\x9b" not in proc.stdout
    if argv[0] == "runs":
        assert "evil\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m" in proc.stdout.splitlines()
    if argv == ["report", "good"]:
        assert "eval\\x1b[31m" in proc.stdout.lower()  # custom types print upper-cased


def test_the_real_demo_deletes_only_the_checkpoints_it_created(tmp_path, monkeypatch, capsys):
    from goodput_core import cli
    from goodput_core.cli import demo_attempts as driver

    def fake_training(cfg, on_message=None):  # the real one is tests/integrations/demo
        os.makedirs(cfg.workdir, exist_ok=True)  # the real training does the same
        with open(os.path.join(cfg.workdir, "ckpt"), "w") as f:
            f.write("x")
        rec = Recorder(cfg.run, cfg.store)
        record_synthetic_job(rec, 1_000_000.0)
        assert rec.close(30)
        return {"attempts": [{}, {}], "final_loss": 0.5}

    monkeypatch.setattr(driver, "frameworks_missing", lambda: [])
    monkeypatch.setattr(driver, "run_crash_and_restart", fake_training)
    other = tmp_path / "checkpoints" / "other-run"
    other.mkdir(parents=True)
    (other / "precious").write_text("keep")
    assert cli.main(["demo", "--outdir", str(tmp_path), "--run", "mine"]) == 0
    assert not (tmp_path / "checkpoints" / "mine").exists()
    assert (other / "precious").read_text() == "keep"
    # Checkpoints already under the name: refused, not deleted.
    assert cli.main(["demo", "--outdir", str(tmp_path), "--run", "other-run"]) == 2
    assert (other / "precious").read_text() == "keep"
    assert "already exists" in capsys.readouterr().err


def test_import_that_fails_halfway_says_how_far_it_got(tmp_path, monkeypatch, capsys):
    from goodput_core import cli
    from goodput_core.cli.commands import import_
    from goodput_core.stores import StoreError
    from goodput_core.stores.memory import MemoryStore

    class DiskFillsUp(MemoryStore):
        def append(self, batch):
            if len(self.read("r")[0]) >= 1000:
                raise StoreError("database or disk is full")
            super().append(batch)

    dest = DiskFillsUp()
    monkeypatch.setattr(import_, "open_store", lambda url, create=True: dest)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"job_name": "r", "step_count": i, "step_start_time": i})
                           + "\n" for i in range(2500)))
    assert cli.main(["import", "r", "--from", str(src), "--to", "sqlite:///x.sqlite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "1000 events were imported before the failure" in err[0]
    assert "running the same import again is safe" in err[0]
