"""TensorBoard exporter (tensorboardX), with the reference's tags.

Scalars written per snapshot (values in percent, as the reference):

=============================================  ==================================
tag                                            step
=============================================  ==================================
``goodput/goodput``                            the largest productive step
``badput/<bucket lower-case>`` (every bucket,  same
including ``data_loading_async``)
``badput/custom_badput_events/<type lower>``   same
``goodput/rolling_<N>s`` (ours)                the window's largest productive step
``step_deviation`` (seconds)                   the step number
``goodput/program_goodput`` (ours: MFU)        the largest productive step
``goodput/ml_productivity_goodput`` (ours)     same
``elastic/stepping_slice_efficiency`` (ours)   same
``elastic/available_slice_efficiency`` (ours)  same
``elastic/rolling_<N>s/stepping_slice_``       the window's largest productive step
``efficiency`` and ``.../available_slice_``
``efficiency`` (ours)
``metrics/<name>`` (ours: model metrics,       the metric's step (0 when it was
raw values)                                    recorded without one)
``insights/hung`` (1 while a hang is open),    the largest productive step
``insights/hang_seconds``,
``insights/checkpoint_recommended_interval_``
``seconds``, ``insights/checkpoint_goodput_``
``gain_points``, ``insights/host_<i>/host_``
``local_seconds`` (top 10 hosts) and
``insights/host_median/...`` (ours)
``run/stopped`` (ours: 1 once the run stopped  the largest productive step
without a job end, 0 if it lives again) and
the text ``run/state`` ("stopped at <UTC
time> (<cause>)", written when it stops)
=============================================  ==================================

The reference has no program goodput, slice efficiency or metric scalars
(it sends slice efficiency to Cloud Monitoring only); ours are in percent
like goodput. Metric points are written once each, with their recorded
time as the event's wall time.

Differences from the reference: ``step_deviation`` is written once per step
(only the steps new since the last cycle; the reference rewrites every step
each time, so its event file grows quadratically); event wall times are the
snapshot's query time; nothing is written before the run has any measured
time (the reference skips such a cycle with an error). Events are written
synchronously and flushed at the end of every export, so a cycle's points
are on disk when it ends (``SummaryWriter.flush()`` does not guarantee that).
"""

from __future__ import annotations

import itertools
import math
import os
import struct
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from goodput_core.timeline.buckets import BadputType
from goodput_core.exporters import registry
from goodput_core.exporters.base import Exporter, MonitorSnapshot
from goodput_core.files import private_file

__all__ = ["TensorBoardExporter", "SUBDIR", "efficiency_tags", "metric_tag", "window_tag",
           "scalar_event", "scalar_value_fields"]

#: The reference writes into ``<tensorboard_dir>/goodput``.
SUBDIR = "goodput"


def metric_tag(name: str) -> str:
    """``metrics/<name>`` without empty path parts: JAX's event names start
    with a slash (``/jax/compilation_cache/...``), which would make
    ``metrics//jax/...``, a tag TensorBoard shows under an empty folder."""
    return "/".join(["metrics", *(part for part in name.split("/") if part)])


def window_tag(size: Any) -> str:
    """``goodput/rolling_<N>s`` for a window of ``size`` seconds."""
    f = float(size)
    return f"goodput/rolling_{int(f) if f.is_integer() else f}s"


def efficiency_tags(size: Any = None) -> Tuple[str, str]:
    """(stepping, available) slice-efficiency tags: cumulative, or of a window
    of ``size`` seconds (``elastic/rolling_<N>s/...``)."""
    if size is None:
        prefix = "elastic"
    else:
        f = float(size)
        prefix = f"elastic/rolling_{int(f) if f.is_integer() else f}s"
    return f"{prefix}/stepping_slice_efficiency", f"{prefix}/available_slice_efficiency"


def _check_directory(log_dir: str) -> None:
    """tensorboardX's ``directory_check`` without importing tensorboardX (a
    third of a second) on the caller's thread: local directories are created;
    URLs (``gs://``, ``s3://``) need none. tensorboardX is imported by the first export.

    Raises:
      ImportError: tensorboardX is not installed.
      OSError: the directory cannot be created.
    """
    import importlib.util

    if importlib.util.find_spec("tensorboardX") is None:
        raise ImportError("the TensorBoard exporter needs tensorboardX: pip install tensorboardX")
    if "://" not in log_dir:
        os.makedirs(log_dir, exist_ok=True)


class _EventFile:
    """A synchronous stand-in for tensorboardX's ``SummaryWriter`` (scalars only).

    ``SummaryWriter`` hands events to a background thread through a queue,
    and its ``flush()`` does not wait for that queue: a file flushed at the
    end of a cycle can still miss that cycle's last points. This writes the
    same ``Event`` records (tensorboardX's ``EventsWriter`` and ``scalar()``
    summary, so local, ``gs://`` and ``s3://`` paths work as before) on the
    exporter's own thread, and ``flush()`` is a real fence.
    """

    _count = itertools.count()

    def __init__(self, log_dir: str):
        from tensorboardX.event_file_writer import EventsWriter  # only this module imports it

        _check_directory(log_dir)  # (again: the directory may have gone since)
        # tensorboardX names files by the second and host only: two writers
        # started within a second in one directory would share a file. The
        # suffix keeps names unique and in creation order (TensorBoard reads a
        # directory's files in name order and may skip one that sorts before
        # a file it has read): the creation time in zero-padded nanoseconds,
        # then the pid and a zero-padded counter for ties.
        suffix = f".goodput.{time.time_ns():020d}.{os.getpid()}.{next(self._count):06d}"
        self._events = EventsWriter(os.path.join(log_dir, "events"), suffix)
        if "://" not in log_dir:  # a local file: private, as everything the tool writes

            private_file(self._events._file_name)
        self._tags: Dict[Tuple[str, str], Any] = {}
        self._write = self._events.write_event
        self._raw: Optional[Any] = None  # writes one serialized Event (the fast path)
        records = getattr(self._events, "_py_recordio_writer", None)
        crc = _native_crc32c()
        if crc is not None and hasattr(records, "_writer"):
            # tensorboardX's own record layout, with a C CRC instead of its
            # pure-Python one when no native crc32c module is installed
            self._file = records._writer
            self._crc = crc
            self._write = self._write_record
            self._raw = self._write_bytes

    def _write_record(self, event: Any) -> None:
        self._write_bytes(event.SerializeToString())

    def _write_bytes(self, data: bytes) -> None:
        header = struct.pack("<Q", len(data))
        self._file.write(header + struct.pack("<I", _masked(self._crc(header))) + data
                         + struct.pack("<I", _masked(self._crc(data))))

    def add_scalar(self, tag: str, value: float, step: int, walltime: Optional[float] = None,
                   display_name: str = "") -> None:
        # the records tensorboardX's scalar() builds, without its per-call numpy
        # checks; with the C CRC, serialized here (scalar_event): a cycle
        # writes one step_deviation point per new step, a thousand a second
        # at 1 ms steps, and protobuf objects cost ten times as much
        wall = time.time() if walltime is None else float(walltime)
        key = (tag, display_name)
        cached = self._tags.get(key)
        if cached is None:
            cached = self._tags[key] = self._prepare(tag, display_name)
        if self._raw is not None:
            self._raw(scalar_event(cached[0], float(value), int(step), wall))
            return
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata

        value_pb = Summary.Value(tag=cached[1], simple_value=float(value))
        if display_name:
            value_pb.metadata.CopyFrom(SummaryMetadata(display_name=display_name))
        self._write(Event(summary=Summary(value=[value_pb]), step=int(step), wall_time=wall))

    @staticmethod
    def _prepare(tag: str, display_name: str) -> Tuple[Tuple[bytes, bytes], str]:
        """(the encoded ``Summary.Value`` fields of the tag and display name,
        the cleaned tag)."""
        from tensorboardX.summary import _clean_tag

        name = _clean_tag(tag)
        return scalar_value_fields(name, display_name), name

    def add_scalar_series(self, tag: str, points: Sequence[Tuple[int, float]],
                          walltime: float) -> None:
        """``add_scalar(tag, value, step, walltime)`` for each ``(step, value)``,
        no display name; with the C CRC, all of them encoded by
        :func:`scalar_records` and written at once (a cycle writes one
        step_deviation point per new step: a few microseconds each here, ~20
        through ``add_scalar``)."""
        if self._raw is None:
            for step, value in points:
                self.add_scalar(tag, value, step, walltime)
            return
        key = (tag, "")
        cached = self._tags.get(key)
        if cached is None:
            cached = self._tags[key] = self._prepare(tag, "")
        self._file.write(scalar_records(cached[0], points, float(walltime), self._crc))

    def add_text(self, tag: str, text_string: str, global_step: int,
                 walltime: Optional[float] = None) -> None:
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.summary import text

        self._events.write_event(Event(summary=text(tag, text_string), step=int(global_step),
                                       wall_time=time.time() if walltime is None else walltime))

    def flush(self) -> None:
        self._events.flush()

    def close(self) -> None:
        self._events.close()


def _varint(n: int) -> bytes:
    """A protobuf varint (a negative int64 as its 64-bit two's complement)."""
    n &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def scalar_value_fields(tag: str, display_name: str = "") -> Tuple[bytes, bytes]:
    """The ``Summary.Value`` fields around the value: (``tag`` (1), and with a
    display name ``metadata`` (9) holding ``SummaryMetadata.display_name`` (2),
    else b"")."""
    meta = _field(9, _field(2, display_name.encode())) if display_name else b""
    return (_field(1, tag.encode()) if tag else b""), meta


def scalar_event(fields: Tuple[bytes, bytes], value: float, step: int, wall: float) -> bytes:
    """The serialized ``Event`` of one scalar: byte for byte what protobuf
    writes for ``Event(wall_time=wall, step=step, summary=Summary(value=[
    Summary.Value(tag=..., simple_value=value, metadata=...)]))`` (fields in
    number order, proto3 zeros left out but the oneof's value). ``fields``: from
    :func:`scalar_value_fields`."""
    tag, meta = fields
    try:
        as_float = struct.pack("<f", value)
    except OverflowError:  # beyond float32: protobuf stores an infinity
        as_float = struct.pack("<f", math.copysign(math.inf, value))
    # simple_value is a member of a oneof: written even when it is zero
    summary_value = tag + b"\x15" + as_float + meta
    summary = _field(1, summary_value)
    as_double = struct.pack("<d", wall)
    return ((b"\x09" + as_double if as_double != b"\0" * 8 else b"")
            + (b"\x10" + _varint(step) if step else b"") + _field(5, summary))


def _uvarint(n: int) -> bytes:
    """:func:`_varint` of a step, its common sizes first."""
    if 0 <= n < 0x4000:
        return bytes((n,)) if n < 0x80 else bytes((n & 0x7F | 0x80, n >> 7))
    if 0 <= n < 0x200000:
        return bytes((n & 0x7F | 0x80, (n >> 7) & 0x7F | 0x80, n >> 14))
    return _varint(n)


def scalar_records(fields: Tuple[bytes, bytes], points: Sequence[Tuple[int, float]],
                   wall: float, crc: Callable[[bytes], int]) -> bytes:
    """The TFRecord-framed events of ``(step, value)`` points of one tag at one
    wall time: byte for byte :func:`scalar_event` of each, each framed as
    ``_EventFile._write_bytes`` frames it (``crc``: CRC-32C of bytes). The
    parts every point shares are encoded once, the float32 values in one
    numpy conversion (beyond float32: an infinity, as protobuf stores it)."""
    if not len(points):
        return b""
    tag, meta = fields
    summary_len = len(tag) + 5 + len(meta)  # tag, 0x15 and the float, metadata
    summary_head = _varint(1 << 3 | 2) + _varint(summary_len)
    event_tail_head = b"\x2a" + _varint(len(summary_head) + summary_len) + summary_head + tag \
        + b"\x15"
    as_double = struct.pack("<d", wall)
    head = b"\x09" + as_double if as_double != b"\0" * 8 else b""
    steps = [int(step) for step, _ in points]
    with np.errstate(over="ignore"):
        floats = np.asarray([value for _, value in points], dtype=np.float64).astype("<f4")
    as_floats = floats.tobytes()
    headers: Dict[int, bytes] = {}
    out = []
    pack_len, pack_crc = struct.Struct("<Q").pack, struct.Struct("<I").pack
    for i, step in enumerate(steps):
        data = head + (b"\x10" + _uvarint(step) if step else b"") + event_tail_head \
            + as_floats[4 * i:4 * i + 4] + meta
        n = len(data)
        framed = headers.get(n)
        if framed is None:
            length = pack_len(n)
            framed = headers[n] = length + pack_crc(_masked(crc(length)))
        out.append(framed)
        out.append(data)
        out.append(pack_crc(_masked(crc(data))))
    return b"".join(out)


def _native_crc32c() -> Optional[Any]:
    """A C implementation of CRC-32C (google-crc32c, which the Google Cloud
    clients bring), or None: tensorboardX's own then computes it."""
    try:
        import google_crc32c
    except ImportError:
        return None
    if getattr(google_crc32c, "implementation", "") != "c":
        return None
    return google_crc32c.value


def _masked(crc: int) -> int:
    """TFRecord's masked CRC (as tensorboardX's ``masked_crc32c``)."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class TensorBoardExporter(Exporter):
    """Writes snapshots as TensorBoard scalars.

    Args:
      tensorboard_dir: the base directory (a local path, or any URL
        tensorboardX can write to).
      subdir: written into ``<tensorboard_dir>/<subdir>`` ("" or None:
        directly into ``tensorboard_dir``); the reference's is "goodput".
      include_badput_breakdown: also write the ``badput/...`` scalars.
      writer: an existing ``SummaryWriter`` to use instead (flushed, not
        closed, by us). Default: a synchronous writer of tensorboardX event
        files (see ``_EventFile``).

    Raises:
      ImportError: tensorboardX is not installed.
    """

    name = "tensorboard"

    def __init__(self, tensorboard_dir: str, *, subdir: Optional[str] = SUBDIR,
                 include_badput_breakdown: bool = True, writer: Any = None):
        self.tensorboard_dir, self.subdir = tensorboard_dir, subdir
        self.log_dir = os.path.join(tensorboard_dir, subdir) if subdir else tensorboard_dir
        self.include_badput_breakdown = bool(include_badput_breakdown)
        self._owns_writer = writer is None
        if writer is None:
            _check_directory(self.log_dir)  # an unwritable directory fails here, not later
        # our event file is created by the first export: an exporter handed to a
        # monitor process leaves no empty file behind in this one
        self._file: Any = writer
        self._said_state = "running"  # the run's state as last written (run/state)

    @property
    def _writer(self) -> Any:
        if self._file is None:
            self._file = _EventFile(self.log_dir)
        return self._file

    def process_spec(self) -> Optional[dict]:
        """Rebuilt in a monitor process unless writing through a supplied writer."""
        if not self._owns_writer or self._file is not None:
            return None
        return registry.spec("tensorboard", tensorboard_dir=os.fspath(self.tensorboard_dir),
                             subdir=self.subdir,
                             include_badput_breakdown=self.include_badput_breakdown)

    def _scalar(self, tag: str, value: float, step: int, wall: float,
                display: bool = True) -> None:
        # the reference names each plot after the tag's last component
        name = tag.rsplit("/", 1)[-1] if display else ""
        self._writer.add_scalar(tag, float(value), int(step), walltime=wall, display_name=name)

    def export(self, snapshot: MonitorSnapshot) -> None:
        """Writes the snapshot's scalars, then flushes the event file."""
        wall = snapshot.query_time
        result = snapshot.cumulative
        if result is not None and result.total_seconds > 0:
            step = result.max_productive_step
            self._scalar("goodput/goodput", result.goodput, step, wall)
            if self.include_badput_breakdown:
                for bucket, pct in result.badput_percent.items():
                    if bucket is not BadputType.CUSTOM_BADPUT_EVENTS:  # written per type below
                        self._scalar(f"badput/{bucket.name.lower()}", pct, step, wall)
                for kind, pct in result.custom_badput_percent.items():
                    self._scalar(f"badput/custom_badput_events/{kind.lower()}", pct, step, wall)
            self._extras(snapshot, step, wall)
            if hasattr(snapshot.state, "describe"):  # rule 15 (our engine's RunState)
                self._state(snapshot, step, wall)
        for size, window in sorted(snapshot.rolling.items()):
            if window.total_seconds > 0:
                self._scalar(window_tag(size), window.goodput, window.max_productive_step, wall)
                eff = snapshot.rolling_slice_efficiency.get(size)
                if eff is not None:
                    self._efficiency(efficiency_tags(size), eff, window.max_productive_step, wall)
        if snapshot.new_step_deviations:
            writer = self._writer
            series = getattr(writer, "add_scalar_series", None)  # ours; not a SummaryWriter's
            if series is not None:
                series("step_deviation", snapshot.new_step_deviations, wall)
            else:
                for step, deviation in snapshot.new_step_deviations:
                    self._scalar("step_deviation", deviation, step, wall, display=False)
        for name, points in sorted(snapshot.new_metric_points.items()):
            for p in points:  # the metric's own step and time, not the cycle's
                self._scalar(metric_tag(name), p.value, max(p.step, 0), p.time)
        self._writer.flush()

    def _extras(self, snapshot: MonitorSnapshot, step: int, wall: float) -> None:
        """Program goodput and cumulative slice efficiency (percent)."""
        prog = snapshot.program_goodput
        if prog is not None:
            self._scalar("goodput/program_goodput", 100.0 * prog.mfu, step, wall)
            self._scalar("goodput/ml_productivity_goodput",
                         100.0 * prog.ml_productivity_goodput, step, wall)
        if snapshot.slice_efficiency is not None:
            self._efficiency(efficiency_tags(), snapshot.slice_efficiency, step, wall)
        self._insights(snapshot, step, wall)

    def _insights(self, snapshot: MonitorSnapshot, step: int, wall: float) -> None:
        """Hangs, checkpoint advice and the top hosts (docs/insights.md)."""
        if snapshot.checkpoint_advice is None and not snapshot.hangs:
            return  # insights off
        self._scalar("insights/hung", 1.0 if snapshot.hung else 0.0, step, wall)
        self._scalar("insights/hang_seconds", snapshot.hang_seconds, step, wall)
        advice = snapshot.checkpoint_advice
        if advice is not None and advice.available:
            self._scalar("insights/checkpoint_recommended_interval_seconds",
                         advice.recommended_interval_seconds, step, wall)
            if advice.goodput_gain_points is not None:
                self._scalar("insights/checkpoint_goodput_gain_points",
                             advice.goodput_gain_points, step, wall)
        if snapshot.hosts is not None:
            for host in snapshot.hosts.top(10):
                self._scalar(f"insights/host_{host.process_index}/host_local_seconds",
                             host.host_local_seconds, step, wall)
            self._scalar("insights/host_median/host_local_seconds",
                         snapshot.hosts.median["host_local_seconds"], step, wall)

    def _state(self, snapshot: MonitorSnapshot, step: int, wall: float) -> None:
        """Once a run stopped: ``run/stopped`` 1 every cycle, and the text
        ``run/state`` ("stopped at <UTC time> (<cause>)") when it first says so;
        a run that was stopped and lives again gets ``run/stopped`` 0."""
        said = snapshot.state.describe()
        if snapshot.stopped or self._said_state != "running":
            self._scalar("run/stopped", 1.0 if snapshot.stopped else 0.0, step, wall)
        if snapshot.stopped and said != self._said_state:
            self._writer.add_text("run/state", said, step, walltime=wall)
        self._said_state = said if snapshot.stopped else "running"

    def _efficiency(self, tags: Tuple[str, str], eff: Any, step: int, wall: float) -> None:
        self._scalar(tags[0], 100.0 * eff.stepping, step, wall)
        self._scalar(tags[1], 100.0 * eff.available, step, wall)

    def close(self) -> None:
        """Flushes and closes the writer (when this exporter created it)."""
        if self._file is None:
            return  # never written: no file
        if self._owns_writer:
            self._file.close()
        else:
            self._file.flush()


def cli_arguments(parser: Any) -> None:
    """``goodput monitor --tensorboard DIR``."""
    parser.add_argument("--tensorboard", metavar="DIR",
                        help="write TensorBoard scalars into DIR/goodput")


def from_cli(args: Any) -> List[Exporter]:
    """The exporter ``--tensorboard`` asks for (none without it).

    Raises:
      OSError: DIR cannot be written (the message says which).
    """
    if not args.tensorboard:
        return []
    try:
        return [TensorBoardExporter(args.tensorboard)]
    except OSError as exc:
        raise OSError(f"cannot write TensorBoard files to {args.tensorboard}: "
                      f"{exc.strerror or exc}") from None
