"""Event files of many writers in one directory, read back by TensorBoard itself.

TensorBoard's directory watcher reads a directory's event files in name
order and never goes back to a file that sorts before the one it is on; its
event accumulator drops points whose step goes backwards. Each exporter (a
monitor restarted with every attempt, a second uploader) opens a new file,
so names must sort in creation order: with an unpadded counter
(``.goodput.<pid>.10`` before ``.9``) TensorBoard loses points. These tests
use 12 writers and TensorBoard's own ``EventAccumulator``.

Mutation killed: the unpadded counter suffix of ``exporters/tensorboard.py``.
"""

from __future__ import annotations

import os

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from goodput_core.exporters.base import MonitorSnapshot
from goodput_core.exporters.tensorboard import TensorBoardExporter

WRITERS = 12  # more than 10: a one-digit counter is not enough


def _write(log_dir, k):
    """The k-th writer: a new exporter (a new file) writes step k, value 10k."""
    exporter = TensorBoardExporter(str(log_dir), subdir=None)
    exporter.export(MonitorSnapshot("run", 1_700_000_000.0 + k,
                                    new_step_deviations=[(k, 10.0 * k)]))
    exporter.close()


def _points(acc):
    return [(e.step, e.value) for e in acc.Scalars("step_deviation")]


def test_names_sort_in_creation_order(tmp_path):
    for k in range(WRITERS):
        before = set(os.listdir(tmp_path))
        _write(tmp_path, k)
        (new,) = set(os.listdir(tmp_path)) - before
        assert all(old < new for old in before), f"{new} sorts before an older file"


def test_tensorboard_reads_every_point_once_in_order(tmp_path):
    for k in range(WRITERS):
        _write(tmp_path, k)
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    assert _points(acc) == [(k, 10.0 * k) for k in range(WRITERS)]


def test_tensorboard_watching_while_writers_come_and_go_misses_nothing(tmp_path):
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    for k in range(WRITERS):
        _write(tmp_path, k)
        acc.Reload()  # TensorBoard polls the directory between writers
        assert _points(acc) == [(j, 10.0 * j) for j in range(k + 1)]
