"""Reads TensorBoard event files back (tests only).

A TFRecord file is a sequence of records: an 8-byte little-endian length,
a 4-byte masked CRC of it, the payload, a 4-byte masked CRC of the payload.
Each payload is a serialised ``Event`` (tensorboardX's own ``event_pb2``).
CRCs are not checked: the files were just written by tensorboardX itself.
"""

from __future__ import annotations

import glob
import os
import struct
from typing import Dict, List, Tuple

from tensorboardX.proto import event_pb2

Scalar = Tuple[int, float, float]  # (step, value, wall time)


def read_events(path: str) -> List["event_pb2.Event"]:
    """Every Event of one event file, in file order."""
    with open(path, "rb") as f:
        data = f.read()
    events = []
    pos = 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        start = pos + 12
        events.append(event_pb2.Event.FromString(data[start:start + length]))
        pos = start + length + 4
    return events


def read_scalars(log_dir: str) -> Dict[str, List[Scalar]]:
    """``{tag: [(step, value, wall time), ...]}`` of every event file in
    ``log_dir`` (files in name order, which is creation order)."""
    out: Dict[str, List[Scalar]] = {}
    for path in sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))):
        for event in read_events(path):
            for value in event.summary.value:
                out.setdefault(value.tag, []).append(
                    (int(event.step), float(value.simple_value), float(event.wall_time)))
    return out


def display_names(log_dir: str) -> Dict[str, str]:
    """``{tag: display name}`` recorded in the summaries' metadata."""
    out: Dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))):
        for event in read_events(path):
            for value in event.summary.value:
                out[value.tag] = value.metadata.display_name
    return out
