"""Worker functions for the multiprocessing tests (importable: spawn children import them)."""

from __future__ import annotations

import os

from goodput_core import Recorder

_RECORDERS = {}


def record_in_child(db: str, run: str, n: int) -> int:
    """Records ``n`` metrics from a recorder created in the child; returns the pid."""
    rec = Recorder(run, db, flush_interval_s=60)  # no periodic flush: only the exit one
    for i in range(n):
        rec.record_metric("child", os.getpid(), step=i)
    return os.getpid()


def record_with_inherited(rec: Recorder, n: int) -> int:
    """Records with a recorder the parent created before forking."""
    for i in range(n):
        rec.record_metric("child", os.getpid(), step=i)
    return os.getpid()


def pool_task(args) -> int:
    """A Pool task: one recorder per worker process, created on its first task."""
    db, run, task, n = args
    rec = _RECORDERS.get(os.getpid())
    if rec is None:
        rec = _RECORDERS[os.getpid()] = Recorder(run, db, flush_interval_s=60)
    for i in range(n):
        rec.record_metric("task", task, step=i)
    return os.getpid()
