"""``goodput export`` / ``goodput import``: moving runs between sqlite, memory,
Cloud Logging (the loopback gRPC fake) and JSONL files.

Runs under test: :mod:`goodput_core.cli.synthetic`'s job (crash and restart,
checkpoints, an eval) recorded by our Recorder, extended with the kinds that
carry extra payload keys; and the compatibility families of
:mod:`tests.support.reference_families` for the checks against the reference.
Equality is checked on what a store gives back: the reference-format payload
(as JSON text, so ``8`` and ``8.0`` differ) and the writer metadata.
"""

from __future__ import annotations

import io
import json
import math
import time
from typing import Any, List

import pytest

from goodput_core.queries.calculator import Calculator
from goodput_core.cli import main
from goodput_core.cli.commands import import_ as import_cmd
from goodput_core.cli.commands.import_ import JsonlSink, StoreSink, copy_run
from goodput_core.cli.commands.transfer import (
    ProgressBar, Skips, parse_line, read_jsonl, read_store, writer_metadata)
from goodput_core.events import EventRecord, Kind, from_payload, to_payload
from goodput_core.record.recorder import Recorder
from goodput_core.stores import open_store
from goodput_core.stores.memory import MemoryStore
from goodput_core.cli.synthetic import record_synthetic_job
from tests.support.fake_cloud_logging import FakeCloudLogging, cloud_store_factory
from tests.support.reference_families import FAMILIES

PROJECT, LOG = "transfer-proj", "goodput-transfer"
RUN = "transfer-run"
T0 = float(int(time.time()) - 3600)  # recent: Cloud Logging reads look back 7 days


# ----------------------------------------------------------------- helpers
class SimClock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        self.now += 0.001  # write times strictly increase, as on a live job
        return self.now


def record_run(url: str, run: str = RUN, start: float = T0) -> None:
    """The synthetic job plus events with extra payload keys, via our Recorder."""
    rec = Recorder(run, store=url, clock=SimClock(start), flush_interval_s=0.01, strict=True)
    info = record_synthetic_job(rec, start)
    t = info["end"]
    rec.record_metadata(framework="jax", num_devices=8, configs={"lr": 0.1, "layers": [1, 2]})
    rec.record_metric("loss", 2.5, step=7, time=t - 1)
    rec.record_checkpoint_stats({  # an Orbax save without a start time: time NaN
        "step": 30, "event_type": "save", "directory": "/ckpt", "synchronous": True,
        "checkpoint_manager_blocking_duration_secs": 0.25})
    rec.record_elastic_slice_counts(2, 4, 3, t - 0.5)
    assert rec.close(10)


def snapshot(store, run: str = RUN) -> List[str]:
    """What a store holds for ``run``: payload + writer metadata, as JSON text."""
    events, _ = store.read(run)
    return [json.dumps([to_payload(e), writer_metadata(e)]) for e in events]


def payloads_of(store, run: str = RUN) -> List[str]:
    events, _ = store.read(run)
    return [json.dumps(to_payload(e)) for e in events]


def sqlite_url(tmp_path, name: str) -> str:
    return "sqlite:///" + str(tmp_path / f"{name}.sqlite").lstrip("/")


def cli(capsys, *argv: str):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def fake():
    with FakeCloudLogging() as server:
        yield server


@pytest.fixture
def cloud(fake, tmp_path):
    with cloud_store_factory(fake, tmp_path / "spill", PROJECT, LOG) as make:
        yield make


# ----------------------------------------------------------------- round trips
def test_sqlite_jsonl_sqlite_round_trip_keeps_payloads_and_writer_metadata(tmp_path, capsys):
    src, dst = sqlite_url(tmp_path, "src"), sqlite_url(tmp_path, "dst")
    record_run(src)
    path = tmp_path / "run.jsonl"
    code, out, err = cli(capsys, "export", RUN, "--store", src, "-o", str(path), "--meta")
    assert code == 0 and out == "" and "exported" in err
    original = snapshot(open_store(src))
    lines = path.read_text().splitlines()
    assert len(lines) == len(original) > 60
    assert [json.dumps([{k: v for k, v in json.loads(x).items() if k != "_writer"},
                        json.loads(x)["_writer"]]) for x in lines] == original
    assert not list(tmp_path.glob("*.tmp-*"))  # the temporary file was renamed

    code, out, err = cli(capsys, "import", RUN, "--from", str(path), "--to", dst)
    assert code == 0 and err == ""
    assert out.strip() == f"imported {len(lines)} events of {RUN!r} into {dst} (0 already there)"
    copy = open_store(dst)
    assert snapshot(copy) == original
    kinds = {e.kind for e in copy.read(RUN)[0]}
    assert {Kind.CHECKPOINT_STATS, Kind.METRIC, Kind.METADATA, Kind.DISRUPTION} <= kinds
    orbax = [e for e in copy.read(RUN)[0] if e.kind == Kind.CHECKPOINT_STATS]
    assert math.isnan(orbax[0].time) and not math.isnan(orbax[0].write_time)


def test_export_without_meta_writes_bare_payloads_to_stdout(tmp_path, capsys):
    src = sqlite_url(tmp_path, "src")
    record_run(src)
    code, out, err = cli(capsys, "export", RUN, "--store", src)
    assert code == 0 and err == ""
    assert out.splitlines() == payloads_of(open_store(src))


def test_sqlite_to_cloud_logging_to_sqlite(tmp_path, capsys, monkeypatch, fake, cloud):
    src, dst = sqlite_url(tmp_path, "src"), sqlite_url(tmp_path, "dst")
    record_run(src)
    url = f"cloud-logging://{PROJECT}/{LOG}"
    real_open = import_cmd.open_store
    # The command opens stores by URL; the Cloud Logging one must reach the fake.
    monkeypatch.setattr(import_cmd, "open_store",
                        lambda u, **kw: cloud() if u == url else real_open(u, **kw))
    code, out, _ = cli(capsys, "import", RUN, "--from", src, "--to", url)
    n = len(snapshot(open_store(src)))
    assert code == 0 and f"imported {n} events" in out
    assert len(fake.payloads(RUN)) == n
    code, out, _ = cli(capsys, "import", RUN, "--from", url, "--to", dst)
    assert code == 0 and f"imported {n} events" in out
    ours, theirs = (Calculator(RUN, u, clock=lambda: T0 + 10_000) for u in (dst, src))
    assert ours.refresh() == theirs.refresh() == n
    ours, theirs = ours.cumulative(), theirs.cumulative()
    assert ours.total_seconds > 60 and 0 < theirs.goodput < 100
    assert sorted(snapshot(open_store(dst))) == sorted(snapshot(open_store(src)))
    assert ours.goodput == pytest.approx(theirs.goodput, rel=1e-12)
    assert ours.badput_seconds == pytest.approx(theirs.badput_seconds, rel=1e-12)


def test_foreign_events_from_memory_through_cloud_logging(tmp_path, fake, cloud):
    payloads, query_time, _ = FAMILIES["orbax_saves"](0)
    run = payloads[0]["job_name"]
    memory = MemoryStore("transfer-foreign")
    memory.append([from_payload(p) for p in payloads])  # no writer metadata at all
    # A family lies in 2023: the reading store's look-back must reach it.
    target = cloud(clock=lambda: query_time)
    assert copy_run(read_store(memory, run, 50), StoreSink(target, run, 50)) == (len(payloads), 0)
    assert target.flush(10)
    dst = open_store(sqlite_url(tmp_path, "dst"))
    assert copy_run(read_store(cloud(clock=lambda: query_time), run, 50),
                    StoreSink(dst, run)) == (len(payloads), 0)
    # Same payloads; entries stamped with equal times come back in insert-id
    # order, which for events without writer metadata is a content hash.
    assert sorted(payloads_of(dst, run)) == sorted(payloads_of(memory, run))


# ----------------------------------------------------------------- idempotence
def test_importing_twice_does_not_duplicate(tmp_path, capsys):
    src, dst = sqlite_url(tmp_path, "src"), sqlite_url(tmp_path, "dst")
    record_run(src)
    path = str(tmp_path / "run.jsonl")
    assert cli(capsys, "export", RUN, "--store", src, "-o", path, "--meta")[0] == 0
    n = len(open(path).read().splitlines())
    for _ in range(2):
        code, out, _ = cli(capsys, "import", RUN, "--from", path, "--to", dst)
        assert code == 0
    assert out.strip().endswith(f"imported 0 events of {RUN!r} into {dst} ({n} already there)")
    assert snapshot(open_store(dst)) == snapshot(open_store(src))
    # Into a JSONL file: appended once, then nothing.
    copy = str(tmp_path / "copy.jsonl")
    for _ in range(2):
        assert cli(capsys, "import", RUN, "--from", dst, "--to", copy)[0] == 0
    assert open(copy).read() == open(path).read()


def test_reimport_without_metadata_matches_by_payload(tmp_path, capsys):
    src, dst = sqlite_url(tmp_path, "src"), sqlite_url(tmp_path, "dst")
    record_run(src)
    bare, meta = str(tmp_path / "bare.jsonl"), str(tmp_path / "meta.jsonl")
    assert cli(capsys, "export", RUN, "--store", src, "-o", bare)[0] == 0
    assert cli(capsys, "export", RUN, "--store", src, "-o", meta, "--meta")[0] == 0
    n = len(open(bare).read().splitlines())
    # Without metadata the events are matched by payload; the metadata copy
    # then finds its events present in their metadata-less form, and back.
    assert "imported %d events" % n in cli(capsys, "import", RUN, "--from", bare, "--to", dst)[1]
    assert "imported 0 events" in cli(capsys, "import", RUN, "--from", meta, "--to", dst)[1]
    other = sqlite_url(tmp_path, "other")
    assert "imported %d events" % n in cli(capsys, "import", RUN, "--from", meta,
                                            "--to", other)[1]
    assert "imported 0 events" in cli(capsys, "import", RUN, "--from", bare, "--to", other)[1]
    assert len(open_store(dst).read(RUN)[0]) == len(open_store(other).read(RUN)[0]) == n


def test_interrupted_import_completes_on_rerun(tmp_path, fake, cloud):
    src = open_store(sqlite_url(tmp_path, "src"))
    record_run(src.url)
    events, _ = src.read(RUN)
    half = cloud()
    half.append(events[: len(events) // 2])
    assert half.flush(10)
    target = cloud()
    assert copy_run(read_store(src, RUN, 16), StoreSink(target, RUN, 16)) == (
        len(events) - len(events) // 2, len(events) // 2)
    assert target.flush(10)
    assert len(fake.payloads(RUN)) == len(events) and fake.calls["duplicates"] == 0
    # A second full import writes nothing at all.
    writes = fake.calls["write"]
    assert copy_run(read_store(src, RUN), StoreSink(cloud(), RUN)) == (0, len(events))
    assert fake.calls["write"] == writes


# ----------------------------------------------------------------- the reference reads exports
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_exported_jsonl_is_read_by_the_reference_with_our_numbers(family, tmp_path, capsys):
    from tests.support.reference_harness import entry_timestamp, reference_job_goodput

    payloads, query_time, _ = FAMILIES[family](0)
    run = payloads[0]["job_name"]
    url = sqlite_url(tmp_path, "src")
    clock = [payloads[0]["job_start_time"]]
    rec = Recorder(run, store=url, clock=lambda: clock[0], flush_interval_s=0.01, strict=True)
    for p in payloads:
        clock[0] = max(clock[0], entry_timestamp(p))
        e = from_payload(p)
        if e.kind == Kind.CHECKPOINT_STATS:
            rec.record_checkpoint_stats(p)
        else:
            rec.record(Kind(e.kind), e.time, e.step, **(e.extra or {}))
    assert rec.close(10)
    path = tmp_path / "run.jsonl"
    assert cli(capsys, "export", run, "--store", url, "-o", str(path))[0] == 0
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines == payloads  # the payloads the job wrote (Orbax's key order aside)
    ref = reference_job_goodput(lines, query_time)
    calc = Calculator(run, url, clock=lambda: query_time)
    assert calc.refresh() == len(payloads)
    r = calc.cumulative()
    assert r.goodput == pytest.approx(ref["goodput_percent"], rel=1e-6)
    assert r.productive_seconds == pytest.approx(ref["productive_seconds"], rel=1e-6)
    assert r.total_seconds == pytest.approx(ref["total_seconds"], rel=1e-6)
    for bucket, seconds in r.badput_seconds.items():
        theirs = ref["badput_seconds"].get(bucket.name, 0.0)
        theirs = sum(theirs.values()) if isinstance(theirs, dict) else theirs
        assert seconds == pytest.approx(theirs, rel=1e-6, abs=1e-9), bucket


# ----------------------------------------------------------------- bad input
def test_bad_lines_are_skipped_counted_and_reported(tmp_path, capsys):
    good = [{"job_name": RUN, "job_start_time": T0},
            {"job_name": RUN, "step_count": 0, "step_start_time": T0 + 1,
             "_writer": {"process_index": 0, "host": "h", "pid": 1, "attempt": "a",
                         "seq": 2, "write_time": T0 + 1.5}},
            {"job_name": RUN, "job_end_time": T0 + 5}]
    lines = [json.dumps(good[0]),
             "this is not json",                                         # line 2
             "[1, 2, 3]",                                                # line 3
             json.dumps({"job_name": RUN, "no_time": 1}),                # line 4
             "",                                                         # blank: ignored
             json.dumps({"job_name": "another-run", "job_start_time": T0}),  # line 6
             json.dumps(good[1]),
             json.dumps({"job_name": RUN, "step_start_time": T0 + 2}),   # line 8: no step
             json.dumps({**good[0], "_writer": {"seq": "x"}}),           # line 9
             json.dumps(good[2]),
             '{"job_name": "transfer-run", "job_end_ti']                 # truncated
    path = tmp_path / "bad.jsonl"
    path.write_bytes("\n".join(lines).encode() + b"\n\xff\xfe garbage\n")  # + invalid UTF-8
    dst = sqlite_url(tmp_path, "dst")
    code, out, err = cli(capsys, "import", RUN, "--from", str(path), "--to", dst)
    assert code == 0
    assert "imported 3 events" in out
    assert err.strip() == (
        "goodput import: skipped 8 unusable input lines: 1 bad_step (first at line 8), "
        "1 bad_writer (first at line 9), 1 no_timestamp (first at line 4), "
        "1 not_a_dict (first at line 3), 3 not_json (first at line 2), "
        "1 other_run (first at line 6)")
    events, _ = open_store(dst).read(RUN)
    assert [to_payload(e) for e in events] == [
        {k: v for k, v in g.items() if k != "_writer"} for g in good]
    assert (events[1].attempt, events[1].seq, events[1].write_time) == ("a", 2, T0 + 1.5)


def test_parse_line_reasons():
    assert parse_line(b"  \n", RUN) is None
    assert parse_line(b'{"step": 1, "event_type": "save", '
                      b'"checkpoint_manager_blocking_duration_secs": 1.0}', RUN).run == RUN
    assert parse_line(b'{"job_name": 3, "job_start_time": 1}', RUN) == "no_job_name"
    assert parse_line(b'{"job_name": "transfer-run", "job_start_time": NaN}', RUN) == "non_finite"
    assert parse_line(b'{"job_name": "transfer-run", "job_start_time": 1, "_writer": 5}',
                      RUN) == "bad_writer"


# ----------------------------------------------------------------- errors: one line, exit 2
@pytest.mark.parametrize("argv,message", [
    (["export", "nope", "--store", "memory://transfer-empty"], "no run named 'nope'"),
    (["import", RUN, "--from", "memory://transfer-empty", "--to", "memory://t-err"],
     f"no events of run {RUN!r}"),
    (["import", RUN, "--from", "ftp://x", "--to", "memory://t-err"], "unknown store scheme"),
    (["import", RUN, "--from", "a.jsonl", "--to", "a.jsonl"], "same file"),
    (["export", RUN, "--store", "memory://transfer-empty", "--page-size", "0"], "--page-size"),
])
def test_errors_are_one_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.jsonl").write_text("")
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"goodput {argv[0]}: error: ")
    assert message in err


def test_an_unreadable_input_is_one_line_and_exit_1(capsys):
    code, out, err = cli(capsys, "import", RUN, "--from", "/nonexistent/x.jsonl",
                         "--to", "memory://t-err")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "cannot read /nonexistent/x.jsonl" in err


def test_export_to_an_unwritable_place_leaves_nothing(tmp_path, capsys):
    src = sqlite_url(tmp_path, "src")
    record_run(src)
    code, _, err = cli(capsys, "export", RUN, "--store", src, "-o",
                       str(tmp_path / "missing-dir" / "x.jsonl"))
    assert code == 1 and "cannot write" in err and err.count("\n") == 1


# ----------------------------------------------------------------- paging and progress
class CountingStore(MemoryStore):
    def __init__(self):
        super().__init__("counting")
        self.limits: List[Any] = []
        self.appends: List[int] = []

    def read(self, run, since=None, limit=None):
        self.limits.append(limit)
        return super().read(run, since, limit)

    def append(self, batch):
        self.appends.append(len(batch))
        super().append(batch)


def test_reads_and_writes_go_page_by_page(tmp_path):
    src, dst = CountingStore(), CountingStore()
    src.append([EventRecord(RUN, int(Kind.STEP_START), T0 + i, i) for i in range(2500)])
    assert copy_run(read_store(src, RUN, 300), StoreSink(dst, RUN, 300)) == (2500, 0)
    assert set(src.limits) == {300} and max(dst.appends) <= 300
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps({"job_name": RUN, "step_count": i,
                                        "step_start_time": T0 + i}) + "\n" for i in range(2500)))
    sink = JsonlSink(str(tmp_path / "out.jsonl"), RUN)
    sizes = []
    for batch in read_jsonl(str(path), RUN, Skips(), 400):
        sizes.append(len(batch))
        sink.write(batch)
    sink.close()
    assert max(sizes) == 400 and sum(sizes) == 2500
    assert (tmp_path / "out.jsonl").read_text() == path.read_text()


def test_progress_bar_draws_with_carriage_returns_and_throttles():
    now = [0.0]
    out = io.StringIO()
    bar = ProgressBar("import r", stream=out, clock=lambda: now[0], width=10)
    bar.update(10, 0.1)
    bar.update(20, 0.2)           # within 0.1 s: not drawn
    now[0] = 1.0
    bar.update(5000, 0.5)
    bar.finish(10_000, 1.0)
    frames = out.getvalue().split("\r")[1:]
    assert len(frames) == 3
    assert frames[0].startswith("import r [#.........]  10% 10 events")
    assert frames[1].startswith("import r [#####.....]  50% 5,000 events (5,000/s)")
    assert frames[2].rstrip("\n").rstrip().endswith("100% 10,000 events (10,000/s)")
    assert out.getvalue().endswith("\n")
    silent = io.StringIO()
    ProgressBar("x", enabled=False, stream=silent).update(5)
    assert silent.getvalue() == ""


def test_progress_flag_shows_the_bar_on_stderr(tmp_path, capsys):
    src = sqlite_url(tmp_path, "src")
    record_run(src)
    path = str(tmp_path / "run.jsonl")
    code, _, err = cli(capsys, "export", RUN, "--store", src, "-o", path, "--progress")
    assert code == 0 and err.startswith(f"\rexport {RUN} ") and " events" in err
    code, out, err = cli(capsys, "import", RUN, "--from", path, "--to",
                         sqlite_url(tmp_path, "dst"), "--progress", "--page-size", "7")
    assert code == 0 and "\r" in err and "100%" in err and err.endswith("\n")
    code, _, err = cli(capsys, "import", RUN, "--from", path, "--to", sqlite_url(tmp_path, "x"))
    assert code == 0 and err == ""  # stderr is not a terminal: no bar
