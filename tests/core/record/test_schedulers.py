"""Scheduling times from schedulers. The Slurm fixture was recorded from a real
Slurm 22.05 (Debian's slurm-wlm: slurmctld, slurmd and slurmdbd on one
machine; `make test-slurm` records a new one): the job ran a run, was requeued
with `scontrol requeue` during step 6, released 3 s later, and completed. The Kubernetes fixture
is written by hand in the shape `kubectl get events -o json` prints (no
cluster here)."""

import json
import os
import re
import subprocess
import sys

import pytest

from goodput_core.record.schedulers import (
    SchedulerFormatError, parse_k8s_events, parse_sacct_json)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")
SLURM = os.path.join(FIXTURES, "slurm", "requeued_job_22.05.json")
K8S = os.path.join(FIXTURES, "kubernetes", "jobset_events.json")


def _sacct():
    with open(SLURM) as f:
        return f.read()


def test_a_requeued_slurm_job_gives_two_submissions_and_two_grants():
    doc = json.loads(_sacct())
    recs = [j["time"] for j in doc["jobs"]]
    times = parse_sacct_json(_sacct(), "1")
    # one submission and one grant per record: the first run, then the requeue
    # (Slurm resets the submission time to the requeue time)
    want = sorted([("submitted", float(t["submission"])) for t in recs]
                  + [("granted", float(t["start"])) for t in recs],
                  key=lambda kv: (kv[1], kv[0] != "submitted"))
    assert times == want
    assert [k for k, _ in times] == ["submitted", "granted", "submitted", "granted"]
    # the requeued instance waited for resources (the driver released it a few
    # seconds after the requeue): a wait of whole seconds, > 0
    (s1, g1) = (times[2][1], times[3][1])
    assert g1 - s1 == recs[1]["start"] - recs[1]["submission"] > 0


def test_the_newer_slurm_number_objects_are_read_too():
    doc = json.loads(_sacct())
    for job in doc["jobs"]:
        for key in ("submission", "start"):
            job["time"][key] = {"set": True, "infinite": False, "number": job["time"][key]}
    assert parse_sacct_json(json.dumps(doc), "1") == parse_sacct_json(_sacct(), "1")


def test_a_pending_record_has_no_grant_and_bad_input_is_one_error():
    doc = {"jobs": [{"job_id": 7, "time": {"submission": 1.7e9, "start": 0}}]}
    assert parse_sacct_json(json.dumps(doc), "7") == [("submitted", 1.7e9)]
    with pytest.raises(SchedulerFormatError, match="no record of job 8"):
        parse_sacct_json(json.dumps(doc), "8")
    with pytest.raises(SchedulerFormatError, match="not sacct --json"):
        parse_sacct_json("<html>", "7")


def test_kubernetes_events_of_a_restarted_jobset():
    with open(K8S) as f:
        times = parse_k8s_events(f.read(), "train")
    import datetime

    def ts(s):
        return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()

    # submitted: the workload's first event (10:00); granted: the last pod of
    # the attempt scheduled (10:04:30.5); requeue: the JobSet restarting (11:00);
    # granted: its last pod scheduled (11:02:05). Another job's pod is ignored.
    assert times == [("submitted", ts("2026-11-20T10:00:00Z")),
                     ("granted", ts("2026-11-20T10:04:30.5Z")),
                     ("submitted", ts("2026-11-20T11:00:00Z")),
                     ("granted", ts("2026-11-20T11:02:05Z"))]
    with pytest.raises(SchedulerFormatError):
        parse_k8s_events(json.dumps({"items": []}), "train")


def test_goodput_import_scheduler_then_report(tmp_path):
    """The command adds the times to a run; the report's lifecycle reads them."""
    from goodput_core.record.recorder import Recorder
    from goodput_core.stores import open_store

    doc = json.loads(_sacct())
    t = [j["time"] for j in doc["jobs"]]
    url = f"sqlite:///{tmp_path}/g.sqlite"
    rec = Recorder("job1", open_store(url), strict=True)
    # the run as the job recorded it: attempt 1 from its start until the requeue
    # (steps every second), attempt 2 from its start to its end
    rec.record_job_start_time(t[0]["start"] + 0.5)
    for k in range(3):
        rec.record_step_start_time(k, t[0]["start"] + 1 + k)
    rec.record_job_start_time(t[1]["start"] + 0.5)
    for k in range(2, 5):
        rec.record_step_start_time(k, t[1]["start"] + 1 + (k - 2))
    rec.record_step_end_time(4, t[1]["end"])
    rec.record_job_end_time(t[1]["end"])
    assert rec.close(30)
    env = {**os.environ}
    base = [sys.executable, "-m", "goodput_core.cli"]
    p = subprocess.run(base + ["import-scheduler", "slurm", "1", "--run", "job1", "--store", url,
                               "--input", SLURM], capture_output=True, text=True, timeout=120,
                       env=env)
    assert p.returncode == 0, p.stderr
    assert "2 submissions, 2 grants" in p.stderr
    p = subprocess.run(base + ["report", "job1", "--store", url, "--json"], capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    lc = json.loads(p.stdout)["lifecycle"]
    # scheduling time = sacct's waits: (start - submission) of each record
    waits = sum(x["start"] - x["submission"] for x in t)
    assert lc["available"] and lc["scheduling_seconds"] == pytest.approx(waits)
    assert lc["wall_seconds"] == pytest.approx(t[1]["end"] - t[0]["submission"])
    assert lc["requeues"] == 1
    bad = subprocess.run(base + ["import-scheduler", "slurm", "1", "--run", "job1", "--store", url,
                                 "--input", str(tmp_path / "missing.json")],
                         capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 1 and "cannot read" in bad.stderr and "Traceback" not in bad.stderr


# ------------------------------------------------------------ all or nothing (issue 43: I3, I4)
NOW = 1.8e9  # 2027-01-15: the end of the plausible range in these tests is a day later


def _job(**times):
    return json.dumps({"jobs": [{"job_id": 7, "time": {"submission": 1.7e9, "start": 1.7e9 + 60,
                                                        "end": 1.7e9 + 3600, **times}}]})


@pytest.mark.parametrize("times, said", [
    ({"submission": 1e999}, "time.submission inf is not a time"),  # JSON's 1e999: infinity
    ({"submission": 1e15}, "time.submission 1e+15 s is not a time"),
    ({"start": {"set": True, "number": 1e15}}, "time.start"),
    ({"start": -5}, "time.start 1969-12-31T23:59:55Z is not a time"),
    ({"start": "soon"}, "time.start nan is not a time"),
    ({"end": NOW + 2 * 86400}, "time.end 2027-01-17"),
    ({"start": 1.7e9 - 1}, "time.submission (2023-11-14T22:13:20Z) is after time.start"),
    ({"end": 1.7e9 + 30}, "time.start (2023-11-14T22:14:20Z) is after time.end"),
])
def test_an_implausible_slurm_time_refuses_the_whole_job(times, said):
    with pytest.raises(SchedulerFormatError, match=re.escape(said)) as info:
        parse_sacct_json(_job(**times), "7", now=NOW)
    assert "job 7 (record 1)" in str(info.value) and "\n" not in str(info.value)
    assert parse_sacct_json(_job(), "7", now=NOW) == [("submitted", 1.7e9),
                                                      ("granted", 1.7e9 + 60)]


def _k8s(*events):
    return json.dumps({"items": [
        {"reason": reason, "involvedObject": {"kind": kind, "name": name}, **times}
        for reason, kind, name, times in events]})


def test_go_zero_time_yields_to_a_valid_field():
    zero = "0001-01-01T00:00:00Z"
    text = _k8s(("Created", "JobSet", "train",
                 {"eventTime": zero, "firstTimestamp": "2026-11-20T10:00:00Z"}),
                ("Scheduled", "Pod", "train-0", {"eventTime": "2026-11-20T10:02:00.000000Z",
                                                 "firstTimestamp": zero}))
    # 2026-11-20T10:00:00Z = 1795168800 (date -d @1795168800 -u)
    assert parse_k8s_events(text, "train", now=NOW) == [("submitted", 1795168800.0),
                                                        ("granted", 1795168920.0)]


@pytest.mark.parametrize("times, said", [
    ({"eventTime": "9999-01-01T00:00:00Z"}, "eventTime '9999-01-01T00:00:00Z': 9999-01-01"),
    ({"eventTime": "0001-01-01T00:00:00Z"}, "eventTime '0001-01-01T00:00:00Z'"),
    ({"firstTimestamp": "yesterday"}, "firstTimestamp 'yesterday' is not a time"),
])
def test_an_event_of_the_job_with_no_valid_time_refuses_the_input(times, said):
    text = _k8s(("Created", "JobSet", "train", {"firstTimestamp": "2026-11-20T10:00:00Z"}),
                ("Scheduled", "Pod", "train-0", times),
                ("Scheduled", "Pod", "other-0", {"eventTime": "9999-01-01T00:00:00Z"}))
    with pytest.raises(SchedulerFormatError, match=re.escape(said)) as info:
        parse_k8s_events(text, "train", now=NOW)
    assert "'Scheduled' of 'Pod' 'train-0'" in str(info.value)
    # another job's events are not read, whatever their times
    assert parse_k8s_events(text.replace("train-0", "elsewhere-0"), "train", now=NOW) == [
        ("submitted", 1795168800.0)]


@pytest.mark.parametrize("scheduler, doc", [
    # the grant is valid and sorts first: it must not be stored before the refusal
    ("slurm", {"jobs": [{"job_id": 7, "time": {"submission": "1e999", "start": 1.7e9}}]}),
    ("kubernetes", {"items": [
        {"reason": "Created", "involvedObject": {"kind": "JobSet", "name": "7"},
         "firstTimestamp": "2026-11-20T10:00:00Z"},
        {"reason": "Scheduled", "involvedObject": {"kind": "Pod", "name": "7-0"},
         "eventTime": "9999-12-31T00:00:00Z"}]}),
])
def test_the_command_stores_nothing_on_refusal(tmp_path, scheduler, doc):
    from goodput_core.stores import open_store

    src = tmp_path / "in.json"
    src.write_text(json.dumps(doc).replace('"1e999"', "1e999"))
    url = f"sqlite:///{tmp_path}/g.sqlite"
    p = subprocess.run([sys.executable, "-m", "goodput_core.cli", "import-scheduler", scheduler,
                        "7", "--run", "r", "--store", url, "--input", str(src)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "nothing imported" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    if os.path.exists(tmp_path / "g.sqlite"):
        store = open_store(url, create=False)
        try:
            assert store.read("r")[0] == []
        finally:
            store.close()
