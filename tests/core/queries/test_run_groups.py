"""Run groups: the run_group key, `goodput runs --group`, `goodput compare`, and
the settings that set it (native API, MaxText flag, AXLearn recorder spec)."""

from __future__ import annotations

import json

import pytest

from goodput_core import Recorder
from goodput_core.queries.calculator import Calculator
from goodput_core.cli import main
from goodput_core.queries.diagnostics import RunContext
from goodput_core.queries.run_groups import check_run_group, record_run_group
from goodput_core.queries.summaries import runs_in_group
from goodput_core.stores import open_store

T0 = 1_700_000_000.0


def record_run(url, name, group, *, steps, end, crash_at=None, restart=None, loss=None,
               configs=None):
    """A run of 1 s steps from T0+1 (job start T0); an optional crash and restart.

    ``restart=(t, first_step)`` re-opens the job at T0+t from ``first_step``.
    """
    rec = Recorder(name, url, clock=lambda: T0)
    rec.record_job_start_time(T0)
    record_run_group(rec, group)
    if configs is not None:
        rec.record_metadata(configs=configs)
    for k in range(steps):
        rec.record_step_start_time(k, T0 + 1 + k)
    if crash_at is not None:
        rec.record_disruption("preempted", T0 + crash_at)
        t, first = restart
        rec.record_job_start_time(T0 + t)
        for j, k in enumerate(range(first, steps + 2)):
            rec.record_step_start_time(k, T0 + t + 1 + j)
    if loss is not None:
        rec.record_metric("loss", loss, step=steps - 1, time=T0 + end - 0.5)
    rec.record_job_end_time(T0 + end)
    assert rec.flush(10)
    rec.close()


@pytest.fixture
def store(tmp_path):
    url = f"sqlite:///{tmp_path / 'groups.sqlite'}"
    # a: 1 s init, steps 0..8 over [1, 10), job end 10 -> productive 9 of 10
    record_run(url, "a", "sweep", steps=9, end=10, loss=0.5, configs={"lr": 0.1, "bs": 8})
    # b: steps 0..4 at 1..5, crash at 5.5, restart at 7 from step 3: steps 3..6 at 8..11,
    #    job end 12 -> disruptions 1
    record_run(url, "b", "sweep", steps=5, end=12, crash_at=5.5, restart=(7, 3), loss=0.7,
               configs={"lr": 0.2, "bs": 8})
    record_run(url, "c", "other", steps=3, end=4)
    return url


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_run_group():
    assert check_run_group("  sweep ") == "sweep"
    assert check_run_group(None) == check_run_group("") == ""
    for bad in (3, ["g"], "a\nb", "x" * 300):
        with pytest.raises(ValueError):
            check_run_group(bad)


def test_group_membership_is_read_from_each_run(store):
    assert [name for name, _ in runs_in_group(open_store(store), "sweep")] == ["a", "b"]
    assert [name for name, _ in runs_in_group(open_store(store), "other")] == ["c"]
    assert runs_in_group(open_store(store), "none") == []


def test_runs_group_lists_goodput_total_disruptions_last_step(capsys, store):
    code, out, _ = cli(capsys, "runs", "--store", store, "--group", "sweep", "--json")
    assert code == 0
    rows = {r["run"]: r for r in json.loads(out)["runs"]}
    assert set(rows) == {"a", "b"}
    a, b = rows["a"], rows["b"]
    assert a["total_seconds"] == pytest.approx(10.0)
    assert a["goodput_percent"] == pytest.approx(90.0)
    assert (a["disruptions"], a["last_step"]) == (0, 8)
    assert b["total_seconds"] == pytest.approx(12.0)
    assert (b["disruptions"], b["last_step"]) == (1, 6)
    # each row is what the run's own report says
    for name, row in rows.items():
        code, out, _ = cli(capsys, "report", name, "--store", store, "--json")
        rep = json.loads(out)
        assert row["goodput_percent"] == pytest.approx(rep["goodput_percent"])
        assert row["disruptions"] == rep["disruptions"]
    code, out, _ = cli(capsys, "runs", "--store", store, "--group", "sweep")
    lines = out.splitlines()
    assert lines[0].split() == ["run", "goodput", "total", "time", "disruptions", "last", "step",
                                 "state"]
    assert lines[1].split()[:3] == ["a", "90.00", "%"] and lines[2].split()[0] == "b"
    code, out, _ = cli(capsys, "runs", "--store", store)
    assert out.split() == ["a", "b", "c"]  # without --group: unchanged
    code, out, _ = cli(capsys, "runs", "--store", store, "--json")
    assert json.loads(out)["runs"] == ["a", "b", "c"]


def test_compare_group_side_by_side(capsys, store):
    code, out, _ = cli(capsys, "compare", "--store", store, "--group", "sweep", "--json")
    assert code == 0
    cmp = json.loads(out)
    assert cmp["group"] == "sweep" and [r["run"] for r in cmp["runs"]] == ["a", "b"]
    for rep in cmp["runs"]:  # every bucket of each run is its `goodput report`
        code, out, _ = cli(capsys, "report", rep["run"], "--store", store, "--json")
        own = json.loads(out)
        assert rep["badput_seconds"] == pytest.approx(own["badput_seconds"])
        assert rep["productive_seconds"] == pytest.approx(own["productive_seconds"])
        assert rep["run_group"] == "sweep"
    a, b = cmp["runs"]
    assert a["badput_seconds"]["TPU_INITIALIZATION"] == 0
    # redone from step 3: step 3's span [4, 5) and step 4's [5, 5.5) up to the crash;
    # recovery from the crash to the new job start [5.5, 7)
    assert b["badput_seconds"]["WASTED_PROGRESS_FROM_DISRUPTION"] == pytest.approx(1.5)
    assert b["badput_seconds"]["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] == pytest.approx(1.5)
    assert cmp["configs_differ"] == {"lr": [0.1, 0.2]}  # bs is the same: left out
    code, out, _ = cli(capsys, "compare", "--store", store, "--group", "sweep")
    lines = {line.split()[0]: line for line in out.splitlines()[2:] if line.strip()}
    assert lines["a"].split() == ["a", "b"]  # the header: one column per run
    wasted = lines["WASTED_PROGRESS_FROM_DISRUPTION"].split()
    assert wasted[1:] == ["0.000", "s", "0.0%", "1.500", "s", "12.5%"]
    assert lines["disruptions"].split()[1:] == ["0", "1"]
    assert lines["config"].split()[1:] == ["lr", "0.1", "0.2"]
    assert "metric loss" in out


def test_compare_named_runs_across_groups(capsys, store):
    code, out, _ = cli(capsys, "compare", "a", "c", "--store", store, "--json")
    cmp = json.loads(out)
    assert cmp["group"] is None
    assert [(r["run"], r["run_group"]) for r in cmp["runs"]] == [("a", "sweep"), ("c", "other")]


@pytest.mark.parametrize("argv, needle", [
    (["compare", "--group", "nope"], "no run in group 'nope'"),
    (["compare", "a", "zzz"], "no run named 'zzz'"),
    (["compare"], "either run names or --group"),
    (["compare", "a", "--group", "sweep"], "either run names or --group"),
])
def test_compare_errors_are_one_line(capsys, store, argv, needle):
    code, out, err = cli(capsys, *argv, "--store", store)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_runs_group_of_an_empty_group(capsys, store):
    code, out, _ = cli(capsys, "runs", "--store", store, "--group", "empty")
    assert code == 0 and out == ""
    code, out, _ = cli(capsys, "runs", "--store", store, "--group", "empty", "--json")
    assert json.loads(out)["runs"] == []


def test_run_context_records_and_checks_the_group():
    url = "memory://run-groups-context"
    rec = Recorder("ctx", url)
    with RunContext(rec, run_group=" ab-test ", configs={"x": 1}):
        pass
    assert rec.flush(10)
    calc = Calculator("ctx", url)
    calc.refresh()
    assert calc.metadata()["run_group"] == "ab-test"
    with pytest.raises(ValueError, match="run_group"):
        RunContext(rec, run_group=7)


def test_maxtext_flag_sets_the_group(tmp_path):
    from goodput_integrations.maxtext import helpers
    from goodput_integrations.maxtext.config import read_settings

    url = f"sqlite:///{tmp_path / 'mt.sqlite'}"
    config = {"enable_goodput_recording": True, "run_name": "mt-run", "goodput_store": url,
              "goodput_run_group": "mt-sweep", "_goodput_process_index": 0}
    rec = helpers.create_goodput_recorder(config)
    assert rec.flush(10)
    assert [n for n, _ in runs_in_group(open_store(url), "mt-sweep")] == ["mt-run"]
    with pytest.raises(ValueError, match="goodput_run_group"):
        read_settings(dict(config, goodput_run_group=5))


def test_axlearn_spec_key_sets_the_group(tmp_path):
    from goodput_integrations.axlearn.spec import parse_spec

    assert parse_spec(["name=x", "enable_monitoring=false", "run_group=ax"]).run_group == "ax"
    with pytest.raises(ValueError, match="run_group"):
        parse_spec(["name=x", "enable_monitoring=false", "run_group=a\tb"])
