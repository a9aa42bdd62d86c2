"""Orbax checkpoint statistics through a real CheckpointManager."""

from __future__ import annotations

import copy
import dataclasses
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from orbax.checkpoint.logging import AbstractLogger, CompositeLogger, step_statistics

import goodput_integrations.orbax as gorbax

SAVE_SPAN = ("checkpoint_manager_blocking_start_time", "checkpoint_manager_blocking_duration_secs")
RESTORE_SPAN = ("checkpoint_manager_start_time", "checkpoint_manager_duration_secs")
SAVE_KEYS = {f.name for f in dataclasses.fields(step_statistics.SaveStepStatistics)}
RESTORE_KEYS = {f.name for f in dataclasses.fields(step_statistics.RestoreStepStatistics)}


class SpyLogger(AbstractLogger):
    """Keeps every entry it is given (the dict objects themselves)."""

    def __init__(self):
        self.entries = []

    def log_entry(self, entry):
        self.entries.append(entry)


class MutatingLogger(AbstractLogger):
    """Like Orbax's CloudLogger: adds keys to the dict it is given."""

    def log_entry(self, entry):
        entry["job_name"] = "mutated"
        entry["extra_key"] = 1


class FailingLogger(AbstractLogger):
    def log_entry(self, entry):
        raise ConnectionError("cloud logging down")


def state():
    return {"w": jnp.arange(12.0).reshape(3, 4), "b": jnp.zeros(4)}


def save_and_restore(manager, steps=(0, 1, 2)):
    for s in steps:
        manager.save(s, args=ocp.args.StandardSave(state()))
    manager.wait_until_finished()
    restored = manager.restore(steps[-1], args=ocp.args.StandardRestore(state()))
    np.testing.assert_array_equal(np.asarray(restored["w"]), np.asarray(state()["w"]))
    manager.close()


def test_built_manager_records_save_and_restore_stats(orec, tmp_path):
    manager = gorbax.goodput_checkpoint_manager(
        tmp_path / "ckpt", ocp.CheckpointManagerOptions(max_to_keep=2),
        recorder=orec.recorder)
    save_and_restore(manager)
    saves, restores = orec.stats("save"), orec.stats("restore")
    assert [p["step"] for p in saves] == [0, 1, 2]
    assert [p["step"] for p in restores] == [2]
    for p in saves:
        assert set(p) == SAVE_KEYS | {"job_name"}
        assert p["job_name"] == orec.run
        assert p[SAVE_SPAN[0]] > 1e9 and p[SAVE_SPAN[1]] >= 0
        assert p["checkpointer_blocking_duration_secs"] >= 0
        assert p["synchronous"] is False  # the default manager saves asynchronously
    assert set(restores[0]) == RESTORE_KEYS | {"job_name"}
    assert restores[0][RESTORE_SPAN[1]] >= restores[0]["checkpointer_duration_secs"] >= 0
    assert restores[0]["directory"] == str(tmp_path / "ckpt")


def test_attach_to_an_existing_manager_keeps_its_logger_and_mutates_nothing(orec, tmp_path):
    spy = SpyLogger()
    manager = ocp.CheckpointManager(tmp_path / "ckpt", logger=spy)
    logger = gorbax.attach(manager, orec.recorder)
    assert gorbax.attach(manager, orec.recorder) is logger  # idempotent
    assert logger.forward_to == (spy,)
    save_and_restore(manager, steps=(0, 1))
    assert len(spy.entries) == 3  # the previous logger still sees every entry
    ours = orec.stats()
    assert len(ours) == 3
    for theirs, mine in zip(spy.entries, ours):
        assert "job_name" not in theirs  # not mutated
        assert {**theirs, "job_name": orec.run} == mine


def test_detach_puts_the_previous_logger_back(orec, tmp_path):
    spy = SpyLogger()
    manager = ocp.CheckpointManager(tmp_path / "ckpt", logger=spy)
    gorbax.attach(manager, orec.recorder)
    assert "save" in vars(manager)  # notes save steps for the async-save metrics
    assert gorbax.detach(manager) is spy
    assert "save" not in vars(manager)  # the class's own save again
    assert gorbax.detach(manager) is None
    manager.save(0, args=ocp.args.StandardSave(state()))
    manager.wait_until_finished()
    manager.close()
    assert orec.stats() == [] and len(spy.entries) == 1


def test_attach_refuses_objects_without_a_logger(orec):
    with pytest.raises(TypeError):
        gorbax.attach(object(), orec.recorder)


def test_composes_inside_a_composite_logger(orec, tmp_path):
    spy = SpyLogger()
    composite = CompositeLogger(gorbax.GoodputLogger(orec.recorder), spy)
    manager = ocp.CheckpointManager(tmp_path / "ckpt", logger=composite)
    save_and_restore(manager, steps=(5,))
    assert [e["event_type"] for e in spy.entries] == ["save", "restore"]
    assert [p["event_type"] for p in orec.stats()] == ["save", "restore"]


def test_a_mutating_logger_after_us_does_not_change_what_we_recorded(orec):
    logger = gorbax.GoodputLogger(orec.recorder, (MutatingLogger(),))
    entry = dataclasses.asdict(step_statistics.SaveStepStatistics(
        step=3, checkpoint_manager_blocking_start_time=1_700_000_000.0,
        checkpoint_manager_blocking_duration_secs=0.5))
    logger.log_entry(entry)
    assert entry["job_name"] == "mutated"  # the forwarded logger mutated the original
    (p,) = orec.stats()
    assert p["job_name"] == orec.run and "extra_key" not in p


def test_our_logger_does_not_mutate_the_entry(orec):
    entry = dataclasses.asdict(step_statistics.RestoreStepStatistics(
        step=1, checkpoint_manager_start_time=1_700_000_000.0,
        checkpoint_manager_duration_secs=2.0))
    snapshot = copy.deepcopy(entry)
    gorbax.GoodputLogger(orec.recorder).log_entry(entry)
    assert entry == snapshot


def test_emergency_restore_entries_are_recorded(orec):
    entry = dataclasses.asdict(step_statistics.EmergencyRestoreStepStatistics(
        step=7, checkpoint_manager_start_time=1_700_000_000.0, directory="/local",
        checkpointer_start_time=1_700_000_000.1, checkpointer_duration_secs=1.0,
        broadcast_start_time=1_700_000_001.1, broadcast_duration_secs=0.5,
        checkpoint_manager_duration_secs=1.7))
    gorbax.GoodputLogger(orec.recorder).log_entry(entry)
    (p,) = orec.stats("emergency_restore")
    assert p[RESTORE_SPAN[0]] == 1_700_000_000.0 and p[RESTORE_SPAN[1]] == 1.7
    assert p["broadcast_duration_secs"] == 0.5 and p["step"] == 7


def test_never_raises(orec):
    class Exploding:
        run = "x"

        def record_checkpoint_stats(self, entry):
            raise RuntimeError("store down")

    spy = SpyLogger()
    logger = gorbax.GoodputLogger(Exploding(), (FailingLogger(), spy))
    logger.log_entry({"event_type": "save", "step": 1})
    logger.log_entry("a plain message, not a dict")
    assert logger.errors == 3
    assert len(spy.entries) == 2  # a failing logger does not starve the next one


def test_values_are_made_json_safe(orec):
    logger = gorbax.GoodputLogger(orec.recorder)
    logger.log_entry({"event_type": "save", "step": np.int64(4),
                      "directory": pathlib.PurePosixPath("/ckpt"),
                      "checkpoint_manager_blocking_start_time": np.float64(1_700_000_000.0),
                      "checkpoint_manager_blocking_duration_secs": jnp.float32(0.25)})
    (p,) = orec.stats()
    assert p["step"] == 4 and type(p["step"]) is int
    assert p["directory"] == "/ckpt"
    assert p["checkpoint_manager_blocking_duration_secs"] == 0.25


def test_only_process_zero_records(orec, monkeypatch):
    monkeypatch.setattr(jax, "process_index", lambda *a, **k: 1)
    spy = SpyLogger()
    logger = gorbax.GoodputLogger(orec.recorder, (spy,))
    logger.log_entry({"event_type": "save", "step": 1})
    assert orec.stats() == [] and len(spy.entries) == 1
    per_host = gorbax.GoodputLogger(orec.recorder, per_host=True)
    per_host.log_entry({"event_type": "save", "step": 1})
    assert len(orec.stats()) == 1


def test_async_commit_metrics(orec, tmp_path):
    monitoring = gorbax.instrument(orec.recorder)
    assert gorbax.instrument(orec.recorder) is monitoring
    manager = gorbax.goodput_checkpoint_manager(tmp_path / "ckpt", recorder=orec.recorder)
    save_and_restore(manager, steps=(0, 1))
    metrics = [p for p in orec.payloads() if "metric_name" in p]
    totals = [p for p in metrics if p["metric_name"] == "checkpoint/async_save_total_seconds"]
    assert len(totals) == 2
    saves = orec.stats("save")
    for save, total in zip(saves, totals):
        # the commit ends after the blocking part that started it, and the
        # metric carries the step of that save
        assert total["metric_time"] >= save[SAVE_SPAN[0]]
        assert total["metric_value"] >= 0
        assert total["step_count"] == save["step"]
    assert [t["step_count"] for t in totals] == [0, 1]
    # clean names (TensorBoard tags metrics/<name>: no double slash), one per event
    assert {p["metric_name"] for p in metrics} <= {
        "checkpoint/async_save_total_seconds", "checkpoint/async_save_background_seconds",
        "checkpoint/save_gbytes"}
    assert all(p["step_count"] in (0, 1) for p in metrics)
    gorbax.uninstrument()
    manager = gorbax.goodput_checkpoint_manager(tmp_path / "ckpt2", recorder=orec.recorder)
    save_and_restore(manager, steps=(0,))
    assert len([p for p in orec.payloads() if "metric_name" in p]) == len(metrics)


def test_names_raise_adapter_unavailable_without_orbax(monkeypatch):
    import sys

    from goodput_integrations import AdapterUnavailable

    monkeypatch.setitem(sys.modules, "orbax.checkpoint.logging", None)
    for mod in ("logger", "manager"):
        monkeypatch.delitem(sys.modules, f"goodput_integrations.orbax.{mod}", raising=False)
    for name in ("GoodputLogger", "attach"):
        monkeypatch.delitem(vars(gorbax), name, raising=False)
    with pytest.raises(AdapterUnavailable):
        gorbax.GoodputLogger  # noqa: B018
    with pytest.raises(AdapterUnavailable):
        from goodput_integrations.orbax import attach  # noqa: F401
