"""TensorBoard exporter: event files read back, tag by tag and value by value."""

import math
import os
import uuid

import pytest

pytest.importorskip("tensorboardX")

from goodput_core.timeline.buckets import BadputType  # noqa: E402
from goodput_core.queries.calculator import Calculator  # noqa: E402
from goodput_core.exporters.base import MonitorSnapshot  # noqa: E402
from goodput_core.exporters.tensorboard import TensorBoardExporter, window_tag  # noqa: E402
from goodput_core.monitor import Monitor  # noqa: E402
from goodput_core.record.recorder import Recorder  # noqa: E402
from goodput_core.stores.memory import MemoryStore  # noqa: E402
from goodput_core.cli.synthetic import record_synthetic_job  # noqa: E402
from tests.support.tfevents import display_names, read_scalars  # noqa: E402

T0 = 1_700_000_000.0
F32 = dict(rel=1e-6, abs=1e-6)  # simple_value is a float32


def _synthetic_store():
    store = MemoryStore(uuid.uuid4().hex)
    rec = Recorder("syn", store, clock=lambda: T0)
    played = record_synthetic_job(rec, T0)
    assert rec.close(30)
    return store, played


def _values(scalars, tag):
    return [(step, value) for step, value, _ in scalars[tag]]


def test_every_tag_and_value_matches_the_calculator(tmp_path):
    store, played = _synthetic_store()
    now = played["end"] + 5.0
    tb = TensorBoardExporter(str(tmp_path))
    m = Monitor("syn", store, [tb], rolling_windows=(60, 3600), clock=lambda: now)
    m.run_once()
    log_dir = tmp_path / "goodput"
    scalars = read_scalars(str(log_dir))  # readable before close: flushed per cycle
    calc = Calculator("syn", store)
    calc.refresh()
    r = calc.cumulative(now)
    assert r.goodput > 0 and r.disruptions == 1 and r.custom_badput_seconds
    step = r.max_productive_step
    expected = {"goodput/goodput": r.goodput}
    for bucket in BadputType:
        if bucket in r.badput_percent and bucket is not BadputType.CUSTOM_BADPUT_EVENTS:
            expected[f"badput/{bucket.name.lower()}"] = r.badput_percent[bucket]
    expected["badput/custom_badput_events/eval"] = r.custom_badput_percent["EVAL"]
    advice = calc.checkpoint_advice(now)  # one crash and saves: advice is available
    assert advice.available and advice.goodput_gain_points is not None
    expected.update({"insights/hung": 0.0, "insights/hang_seconds": 0.0,
                     "insights/checkpoint_recommended_interval_seconds":
                         advice.recommended_interval_seconds,
                     "insights/checkpoint_goodput_gain_points": advice.goodput_gain_points})
    for tag, value in expected.items():
        assert _values(scalars, tag) == [(step, pytest.approx(value, **F32))], tag
    for size, w in zip((60, 3600), calc.rolling([60, 3600], now)):
        tag = f"goodput/rolling_{size}s"
        assert _values(scalars, tag) == [(w.max_productive_step, pytest.approx(w.goodput, **F32))]
    deviations = calc.step_stats().as_dict()
    assert len(deviations) > 20
    assert dict(_values(scalars, "step_deviation")) == pytest.approx(deviations, **F32)
    assert set(scalars) == set(expected) | {"goodput/rolling_60s", "goodput/rolling_3600s",
                                            "step_deviation"}
    # the badput tags are exactly the reference's eleven buckets minus the custom total
    assert len([t for t in scalars if t.startswith("badput/") and t.count("/") == 1]) == 10
    assert all(w == pytest.approx(now) for tag in scalars for _, _, w in scalars[tag])
    names = display_names(str(log_dir))
    assert names["goodput/goodput"] == "goodput"
    assert names["badput/custom_badput_events/eval"] == "eval"
    assert names["badput/tpu_initialization"] == "tpu_initialization"
    assert names["step_deviation"] == ""
    m.stop(10)


def test_step_deviation_is_written_incrementally(tmp_path):
    store = MemoryStore(uuid.uuid4().hex)
    clock = [T0]
    rec = Recorder("inc", store, clock=lambda: clock[0])
    rec.record_job_start_time(T0)
    t = T0
    for k in range(10):
        rec.record_step_start_time(k, t)
        t += 2.0 if k != 3 else 5.0
    assert rec.flush(30)
    clock[0] = t
    m = Monitor("inc", store, [TensorBoardExporter(str(tmp_path), subdir="")],
                clock=lambda: clock[0], configured_ideal_step_time=2.0)
    m.run_once()
    m.run_once()  # nothing new: nothing written again
    first = read_scalars(str(tmp_path))["step_deviation"]
    assert [(s, v) for s, v, _ in first] == [(k, 3.0 if k == 3 else 0.0) for k in range(9)]
    for k in range(10, 15):
        rec.record_step_start_time(k, t)
        t += 2.5
    rec.record_step_end_time(14, t)
    assert rec.flush(30)
    clock[0] = t
    m.run_once()
    second = read_scalars(str(tmp_path))["step_deviation"]
    assert second[:len(first)] == first
    assert [(s, v) for s, v, _ in second[len(first):]] == [(9, 0.0)] + [
        (k, 0.5) for k in range(10, 15)]
    assert [w for _, _, w in second[len(first):]] == [pytest.approx(t)] * 6
    m.stop(10)


def test_without_breakdown_and_before_any_job_start(tmp_path):
    store, played = _synthetic_store()
    tb = TensorBoardExporter(str(tmp_path), include_badput_breakdown=False)
    m = Monitor("syn", store, [tb], include_step_deviation=False, include_insights=False,
                clock=lambda: played["end"])
    m.run_once()
    assert set(read_scalars(str(tmp_path / "goodput"))) == {"goodput/goodput"}
    m.stop(10)
    # a run with no events: the file exists, but no goodput point is invented
    other = TensorBoardExporter(str(tmp_path / "empty"))
    empty = Monitor("nothing", MemoryStore(uuid.uuid4().hex), [other])
    snap = empty.run_once()
    assert snap.cumulative.total_seconds == 0
    empty.stop(10)
    assert read_scalars(str(tmp_path / "empty" / "goodput")) == {}
    assert os.listdir(tmp_path / "empty" / "goodput")


def test_a_supplied_writer_is_flushed_not_closed():
    calls = []

    class Writer:
        def add_scalar(self, tag, value, step, walltime=None, display_name=""):
            calls.append((tag, value, step))

        def flush(self):
            calls.append("flush")

        def close(self):
            calls.append("close")

    tb = TensorBoardExporter("unused", writer=Writer())
    tb.export(MonitorSnapshot("r", T0, new_step_deviations=[(3, 0.25)]))
    tb.close()
    assert calls == [("step_deviation", 0.25, 3), "flush", "flush"]


def test_window_tag():
    assert window_tag(60) == "goodput/rolling_60s"
    assert window_tag(3600.0) == "goodput/rolling_3600s"
    assert window_tag(1.5) == "goodput/rolling_1.5s"


def test_every_record_carries_tensorboardx_s_own_crcs(tmp_path):
    # TensorBoard drops a record whose CRC is wrong: check both of every record
    # with tensorboardX's own (pure-Python) masked CRC-32C
    import glob
    import struct

    from tensorboardX.record_writer import masked_crc32c

    tb = TensorBoardExporter(str(tmp_path))
    tb.export(MonitorSnapshot("r", 1_700_000_000.0,
                              new_step_deviations=[(s, s / 7.0) for s in range(50)]))
    tb.close()
    (path,) = glob.glob(str(tmp_path / "goodput" / "events.out.tfevents.*"))
    data = open(path, "rb").read()
    pos, records = 0, 0
    while pos < len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", data[pos + 8:pos + 12])[0] == masked_crc32c(header)
        body = data[pos + 12:pos + 12 + length]
        assert struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])[0] == \
            masked_crc32c(body)
        pos += 16 + length
        records += 1
    assert records == 51  # the file version record and the 50 deviations
    assert read_scalars(str(tmp_path / "goodput"))["step_deviation"][7][:2] == (
        7, pytest.approx(1.0, rel=1e-6))


def test_metric_tags_have_no_empty_parts_read_back(tmp_path):
    """JAX's compilation-cache metrics (as the JAX adapter records them) start
    with a slash: their tags are ``metrics/jax/...``, never ``metrics//jax/...``."""
    from goodput_integrations.jax.listeners import CACHE_METRICS

    store = MemoryStore(uuid.uuid4().hex)
    rec = Recorder("tags", store, clock=lambda: T0)
    rec.record_job_start_time(T0)
    names = sorted(CACHE_METRICS) + ["loss", "eval//loss/"]
    for i, name in enumerate(names):
        rec.record_metric(name, float(i), step=1, time=T0 + 1)
    assert rec.close(30)
    m = Monitor("tags", store, [TensorBoardExporter(str(tmp_path))], clock=lambda: T0 + 10)
    m.run_once()
    assert m.stop(10)
    scalars = read_scalars(os.path.join(str(tmp_path), "goodput"))
    tags = sorted(t for t in scalars if t.startswith("metrics"))
    # by hand: every name's non-empty parts after "metrics/"
    assert tags == sorted(["metrics/jax/compilation_cache/cache_retrieval_time_sec",
                           "metrics/jax/compilation_cache/compile_time_saved_sec",
                           "metrics/loss", "metrics/eval/loss"])
    assert not any("//" in t for t in scalars)


@pytest.mark.parametrize("tag,display", [("step_deviation", ""), ("goodput/goodput", "goodput"),
                                         ("metrics/loss", "loss"), ("", ""), ("ü/tag", "ü")])
def test_scalar_events_are_the_bytes_protobuf_writes(tag, display):
    # the exporter serializes scalar events itself (a thousand a cycle at 1 ms
    # steps): the bytes must be protobuf's own, whatever the value, step and time
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata

    from goodput_core.exporters.tensorboard import scalar_event, scalar_value_fields

    fields = scalar_value_fields(tag, display)
    for value in (0.0, -0.0, 1.5, -2.25e-3, 1e-45, 3.4e38, 1e39, -1e300, math.inf, -math.inf,
                  math.nan):
        for step in (0, 1, 127, 128, 2 ** 31, 2 ** 62, -1, -(2 ** 40)):
            for wall in (0.0, 1_700_000_000.123456, -0.0, 5e-324):
                value_pb = Summary.Value(tag=tag, simple_value=value)
                if display:
                    value_pb.metadata.CopyFrom(SummaryMetadata(display_name=display))
                ref = Event(summary=Summary(value=[value_pb]), step=step, wall_time=wall)
                assert scalar_event(fields, value, step, wall) == ref.SerializeToString(), \
                    (value, step, wall)


@pytest.mark.parametrize("tag,display", [("step_deviation", ""), ("metrics/loss", "loss"),
                                         ("", "")])
def test_a_series_of_records_is_protobuf_s_bytes_framed_as_tensorboardx_frames_them(
        tag, display):
    # a cycle's step deviations are encoded at once (scalar_records): each
    # record must be the framed bytes of protobuf's own Event, CRCs by
    # tensorboardX's own (pure-Python) CRC-32C
    import struct

    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboardX.record_writer import masked_crc32c

    from goodput_core.exporters.tensorboard import (
        _native_crc32c, scalar_records, scalar_value_fields)

    crc = _native_crc32c()
    if crc is None:
        pytest.skip("no C CRC-32C here: the series is written point by point")
    values = (0.0, -0.0, 1.5, -2.25e-3, 1e-45, 3.4e38, 1e39, -1e300, math.inf, -math.inf,
              math.nan)
    steps = (0, 1, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, 2 ** 31, 2 ** 62, -1,
             -(2 ** 40))
    points = [(step, value) for value in values for step in steps]
    for wall in (0.0, 1_700_000_000.123456, -0.0):
        want = []
        for step, value in points:
            value_pb = Summary.Value(tag=tag, simple_value=value)
            if display:
                value_pb.metadata.CopyFrom(SummaryMetadata(display_name=display))
            data = Event(summary=Summary(value=[value_pb]), step=step,
                         wall_time=wall).SerializeToString()
            header = struct.pack("<Q", len(data))
            want.append(header + struct.pack("<I", masked_crc32c(header)) + data
                        + struct.pack("<I", masked_crc32c(data)))
        assert scalar_records(scalar_value_fields(tag, display), points, wall, crc) == \
            b"".join(want)
    assert scalar_records(scalar_value_fields(tag, display), [], 1.0, crc) == b""
