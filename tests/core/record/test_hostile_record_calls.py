"""No ``record_*`` call raises into the caller, whatever it is given (issue 13, items 8-10).

A property test calls every public ``record_*`` method of the recorder with
hostile values of every type; in non-strict mode nothing may raise, and
everything the recorder accepted must then be stored by a real SQLite store
(nothing accepted that the writer has to drop). In strict mode the only
exception is ValueError. Then the fixes the attack found one by one: numpy
times, ``flush(math.inf)``, events after ``close()``, metadata and slice
counts the calculator cannot use.
"""

from __future__ import annotations

import datetime as dt
import decimal
import fractions
import inspect
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from goodput_core import Recorder
from goodput_core.queries.calculator import Calculator
from goodput_core.cli.commands.report import build_report, format_table
from goodput_core.events import Kind
from goodput_core.stores.memory import MemoryStore
from goodput_core.stores.sqlite import SqliteStore

SETTINGS = settings(max_examples=int(os.environ.get("GOODPUT_HYPOTHESIS_EXAMPLES", 200)),
                    deadline=None, suppress_health_check=list(HealthCheck))


class Raising:
    """Every conversion raises (a deleted jax array raises RuntimeError on float())."""

    def __init__(self, exc=RuntimeError):
        self.exc = exc

    def _raise(self, *args):
        raise self.exc("hostile")

    def __repr__(self):  # readable in a falsifying example; str() still raises
        return f"Raising({self.exc.__name__})"

    __str__ = __int__ = __float__ = __index__ = __bool__ = _raise
    __eq__ = __lt__ = __le__ = __gt__ = __ge__ = __ne__ = _raise
    __hash__ = None  # type: ignore[assignment]
    __iter__ = __len__ = _raise


class StrRaises(str):
    def __str__(self):
        raise ValueError("no")


def _cyclic_list():
    c = []
    c.append(c)
    return c


def _cyclic_dict():
    d = {}
    d["self"] = d
    return d


HOSTILE = st.one_of(
    st.sampled_from([
        None, True, False, 0, -1, 1, 2 ** 63, -(2 ** 63) - 1, 2 ** 70, 10 ** 400, -(10 ** 400),
        math.nan, math.inf, -math.inf, 1e308, -0.0, 0.5, 1j, b"bytes", bytearray(b"x"),
        "", "x", "\udc80", "a\x00b", "\x1b[31mred", "9" * 5000, [], [1], (1, 2), {}, {"a": 1},
        {(1, 2): 3}, {1: 2}, object(), Raising(), Raising(OverflowError), Raising(KeyError),
        StrRaises("s"), np.int64(5), np.int64(-7), np.uint64(2 ** 64 - 1), np.float32(1.5),
        np.float64("nan"), np.float16(3), np.bool_(True), np.array([1.0, 2.0]), np.array(3.0),
        fractions.Fraction(10 ** 400, 3), decimal.Decimal("1e999"), decimal.Decimal("nan"),
        dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
        dt.date(2024, 1, 1), dt.timedelta(seconds=1), Kind.STEP_START, 999, -3,
    ]),
    st.builds(lambda: _cyclic_list()), st.builds(lambda: _cyclic_dict()),
    st.integers(), st.floats(), st.text(max_size=8),
    st.dictionaries(st.one_of(st.text(max_size=3), st.integers(), st.tuples(st.integers())),
                    st.one_of(st.integers(), st.floats(), st.text(max_size=3)), max_size=3),
)

METHODS = sorted(n for n in dir(Recorder) if n.startswith("record"))


def _positional(name):
    params = list(inspect.signature(getattr(Recorder, name)).parameters.values())[1:]
    return [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def test_every_public_record_method_is_covered():
    assert len(METHODS) >= 25  # the reference's methods, the elastic ones and ours
    assert "record_metadata" in METHODS and "record" in METHODS


class _Shared:
    """One recorder per mode for all examples (a thread and a SQLite file each)."""

    recorders = {}

    @classmethod
    def get(cls, strict, tmp):
        if strict not in cls.recorders:
            cls.recorders[strict] = Recorder(
                f"hostile-{strict}", SqliteStore(os.path.join(tmp, f"h{strict}.sqlite")),
                strict=strict, flush_interval_s=0.05)
        return cls.recorders[strict]


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory):
    yield str(tmp_path_factory.mktemp("hostile"))
    for rec in _Shared.recorders.values():
        rec.close()
    _Shared.recorders.clear()


def _call(rec, name, data):
    method = getattr(rec, name)
    args = [data.draw(HOSTILE, label=p.name) for p in _positional(name)]
    if name == "record_metadata":
        keys = data.draw(st.lists(st.sampled_from(
            ["num_devices", "num_processes", "flops_per_step", "peak_flops_per_device",
             "configs", "device_kind", "x"]), max_size=4, unique=True))
        return method(**{k: data.draw(HOSTILE, label=k) for k in keys})
    if name == "record":
        extra = {"cfg": data.draw(HOSTILE, label="extra")} if data.draw(st.booleans()) else {}
        return method(*args, **extra)
    return method(*args)


@SETTINGS
@given(data=st.data())
def test_no_record_call_raises_in_non_strict_mode_and_all_it_accepts_is_stored(
        shared_dir, data):
    rec = _Shared.get(False, shared_dir)
    for name in data.draw(st.lists(st.sampled_from(METHODS), min_size=1, max_size=4)):
        _call(rec, name, data)  # must not raise, whatever the values
    assert rec.flush(30)
    stats = rec.stats()
    # Everything accepted was storable: the writer neither retried nor dropped.
    assert stats["write_errors"] == 0 and stats["unstorable"] == 0, stats


@SETTINGS
@given(data=st.data())
def test_strict_mode_raises_only_value_error(shared_dir, data):
    rec = _Shared.get(True, shared_dir)
    name = data.draw(st.sampled_from(METHODS))
    try:
        _call(rec, name, data)
    except ValueError:
        pass
    assert rec.flush(30)
    assert rec.stats()["write_errors"] == 0 and rec.stats()["unstorable"] == 0


@pytest.mark.parametrize("when", [np.int64(1_700_000_000), np.float32(1024.0),
                                  np.float64(1_700_000_000.5), np.uint32(1000),
                                  fractions.Fraction(3, 2)])
def test_numpy_scalar_and_other_real_times_are_accepted(when):
    store = MemoryStore()
    rec = Recorder("run", store, strict=True)
    rec.record_job_start_time(when)
    rec.record_step_start_time(np.int64(3), when)
    assert rec.flush(10)
    events = store.read("run")[0]
    assert [e.time for e in events] == [float(when)] * 2
    assert type(events[0].time) is float and events[1].step == 3


def test_flush_with_an_infinite_timeout_means_no_limit():
    store = MemoryStore()
    rec = Recorder("run", store)
    rec.record_job_start_time(1.0)
    assert rec.flush(math.inf) is True
    assert rec.flush(math.nan) in (True, False)  # no exception
    assert len(store.read("run")[0]) == 1


def test_events_recorded_after_close_are_dropped_and_counted():
    store = MemoryStore()
    rec = Recorder("run", store)
    rec.record_job_start_time(1.0)
    assert rec.close()
    rec.record_job_end_time(2.0)
    rec.flush(1)
    assert [e.kind for e in store.read("run")[0]] == [Kind.JOB_START]
    assert rec.stats()["dropped"] == 1


@pytest.mark.parametrize("field, value", [
    ("num_devices", 0.5), ("num_devices", 0), ("num_devices", -8), ("num_devices", "8"),
    ("num_processes", 1.5), ("flops_per_step", math.inf), ("flops_per_step", -1.0),
    ("peak_flops_per_device", math.nan), ("peak_flops_per_device", 0)])
def test_metadata_the_calculator_cannot_use_is_dropped_field_by_field(field, value):
    store = MemoryStore()
    rec = Recorder("run", store)
    rec.record_metadata(device_kind="TPU v4", **{field: value})
    assert rec.flush(10)
    (event,) = store.read("run")[0]
    assert event.extra == {"device_kind": "TPU v4"}  # the good field is kept
    assert rec.stats()["rejected"] == {"metadata": 1}
    with pytest.raises(ValueError, match=field):
        Recorder("run", MemoryStore(), strict=True).record_metadata(**{field: value})


@pytest.mark.parametrize("counts", [(-9, 10, 10), (1, -2, 1), (1, 2, -1), (1.5, 2, 2),
                                    (True, 2, 2)])
def test_negative_or_fractional_slice_counts_are_rejected(counts):
    store = MemoryStore()
    rec = Recorder("run", store)
    rec.record_elastic_slice_counts(*counts, timestamp=5.0)
    rec.record_elastic_slice_counts(np.int64(2), 4.0, 3, timestamp=6.0)  # integral: kept
    assert rec.flush(10)
    assert [e.extra for e in store.read("run")[0]] == [
        {"active_slices": 2, "total_slices": 4, "available_slices": 3}]
    assert rec.stats()["rejected"] == {"elastic_slice_counts": 1}


def _job(rec, **metadata):
    rec.record_job_start_time(1000.0)
    if metadata:
        rec.record_metadata(**metadata)
    for i in range(10):
        rec.record_step_start_time(i, 1001.0 + i)
    rec.record_job_end_time(1012.0)


def _report(store):
    calc = Calculator("run", store)
    calc.refresh()
    result = calc.cumulative(now=2000.0)
    report = build_report(calc, result, calc.step_stats(), store_url=store.url,
                          window_spec=None, exclude=[])
    return report, format_table(report)


@pytest.mark.parametrize("metadata", [
    # Each field valid on its own; together they overflow to an infinite MFU.
    {"flops_per_step": 1e308, "peak_flops_per_device": 1e-300, "num_devices": 1},
    {"flops_per_step": 1e12, "peak_flops_per_device": 1e12, "num_devices": 0.5},
])
def test_the_report_shows_what_it_can_with_unusable_program_metadata(metadata):
    store = MemoryStore()
    rec = Recorder("run", store)
    rec.record_job_start_time(1000.0)
    # _record directly: an older writer or a foreign log let these fields through.
    rec._record(Kind.METADATA, None, None, dict(metadata))
    for i in range(10):
        rec.record_step_start_time(i, 1001.0 + i)
    rec.record_job_end_time(1012.0)
    rec.record_metric("loss", math.inf, step=3)
    assert rec.flush(10)
    report, text = _report(store)
    assert report["total_seconds"] == 12.0 and report["goodput_percent"] is not None
    assert report["program_goodput"] is None  # not computable: left out, not fatal
    if metadata["num_devices"] == 0.5:  # and said why
        assert report["program_goodput_unusable"] == ["num_devices=0.5"]
        assert "not computed, unusable metadata: num_devices=0.5" in text
    assert report["skipped"] == {"non_finite": 1}  # the infinite loss: skipped and said
    assert "non_finite" in text


def test_negative_slice_counts_already_in_a_store_are_skipped_and_reported():
    store = MemoryStore()
    rec = Recorder("run", store)
    rec.record_job_start_time(1000.0)
    rec.record_elastic_slice_counts(2, 2, 2, timestamp=1000.0)
    # _record directly: written by a version that did not check the counts.
    rec._record(Kind.ELASTIC_SLICE_COUNTS, 1005.0, None,
                {"active_slices": -9, "total_slices": 10, "available_slices": 10})
    for i in range(10):
        rec.record_step_start_time(i, 1001.0 + i)
    rec.record_job_end_time(1012.0)
    assert rec.flush(10)
    report, text = _report(store)
    assert report["skipped"] == {"negative_count": 1}
    assert report["slice_efficiency"]["stepping"] == 1.0  # the good record holds throughout
    assert "negative_count" in text
