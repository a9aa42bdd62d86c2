"""``goodput timeline``: the PNG (matplotlib) and the self-contained HTML.

The run is :mod:`goodput_core.cli.synthetic`'s default job (a crash, a recovery
gap, a restart) recorded into a sqlite store in ``tmp_path``. The PNG tests
need matplotlib (the ``plot`` extra) and are skipped without it; the HTML
needs nothing.
"""

from __future__ import annotations

import re
import struct
import sys

import pytest

from goodput_core.queries.calculator import Calculator
from goodput_core.cli import main
from goodput_core.cli.commands.timeline import html_page
from goodput_core.events import EventRecord, Kind
from goodput_core.cli.plot_timeline import COLOURS, collect
from goodput_core.record.recorder import Recorder
from goodput_core.cli.synthetic import SyntheticJob, record_synthetic_job

START = 1_700_000_000.0
JOB = SyntheticJob()


class _Store(str):
    """The store URL, with what the synthetic job played (``.played``)."""

    def __new__(cls, url, played):
        self = super().__new__(cls, url)
        self.played = played
        return self


@pytest.fixture
def store(tmp_path):
    url = f"sqlite:///{tmp_path / 'goodput.sqlite'}"
    rec = Recorder("syn", url)
    played = record_synthetic_job(rec, START, JOB)
    assert rec.flush(10)
    rec.close()
    rec = Recorder("nostart", url)
    rec.record_step_start_time(1, START)
    assert rec.flush(10)
    rec.close()
    return _Store(url, played)


def _calc(store):
    calc = Calculator("syn", store)
    calc.refresh()
    return calc


def _png_size(data: bytes):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


# -------------------------------------------------------------------- PNG
def test_png_is_written(tmp_path, store, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "syn.png"
    assert main(["timeline", "syn", "--store", store, "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    data = out.read_bytes()
    w, h = _png_size(data)
    assert 800 <= w <= 4000 and 400 <= h <= 3000
    assert 20_000 < len(data) < 5_000_000  # a real picture, not an empty canvas
    assert data.endswith(b"IEND\xaeB`\x82")


def test_png_with_window(tmp_path, store):
    pytest.importorskip("matplotlib")
    out = tmp_path / "last.png"
    assert main(["timeline", "syn", "--store", store, "-o", str(out), "--window", "30s"]) == 0
    _png_size(out.read_bytes())


def test_missing_matplotlib_is_one_line(tmp_path, store, capsys, monkeypatch):
    # a None entry in sys.modules makes `import matplotlib` raise ImportError
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "syn.png"
    assert main(["timeline", "syn", "--store", store, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'goodput-core[plot]'" in err
    assert not out.exists()


# ------------------------------------------------------------------- HTML
def test_html_has_one_lane_per_category_and_no_urls(tmp_path, store):
    out = tmp_path / "syn.html"
    assert main(["timeline", "syn", "--store", store, "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    categories = {label for _, _, label in _calc(store).spans()}
    lanes = re.findall(r'<g class="lane" data-category="([^"]+)">', page)
    assert sorted(lanes) == sorted(categories)  # one element per category, no more
    assert {"PRODUCTIVE", "WASTED_PROGRESS_FROM_DISRUPTION",
            "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
            "CUSTOM_BADPUT_EVENTS:EVAL"} <= set(lanes)
    # self-contained: nothing fetched from elsewhere
    assert "http://" not in page and "https://" not in page
    assert not re.search(r'\b(src|href)\s*=', page)
    assert page.count("<title>") > len(lanes)  # hover titles on the spans
    assert "goodput 35.8 %" in page
    assert 'data-kind="restart"' in page and 'data-kind="crash"' in page


def test_html_window_drops_lanes_outside_it(store):
    calc = _calc(store)
    end = store.played["end"]
    # the last 10 s: productive steps and the final save, no crash, no recovery
    page = html_page(collect(calc, end - 10, end))
    lanes = set(re.findall(r'data-category="([^"]+)"', page))
    assert lanes == {"PRODUCTIVE", "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"}
    assert 'data-kind="crash"' not in page


# ------------------------------------------------------------ the data
def test_collect_lanes_totals_and_markers(store):
    calc = _calc(store)
    data = collect(calc)
    keys = [lane.key for lane in data.lanes]
    assert keys[0] == "PRODUCTIVE"
    assert keys.index("CUSTOM_BADPUT_EVENTS:EVAL") > keys.index("TPU_INITIALIZATION")
    by_key = {lane.key: lane for lane in data.lanes}
    total = store.played["end"] - START
    assert data.total_seconds == pytest.approx(total, abs=1e-5)
    # from SyntheticJob and semantics.md: 10 productive steps of each kept range
    assert by_key["PRODUCTIVE"].seconds == pytest.approx(JOB.steps * JOB.step, abs=1e-5)
    assert by_key["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"].seconds == pytest.approx(
        JOB.recovery_gap, abs=1e-5)
    assert by_key["PRODUCTIVE"].percent == pytest.approx(
        100 * JOB.steps * JOB.step / total, rel=1e-6)
    assert sum(lane.seconds for lane in data.lanes) == pytest.approx(total, abs=1e-5)
    assert by_key["PRODUCTIVE"].colour == COLOURS["PRODUCTIVE"]
    assert len({lane.colour for lane in data.lanes}) == len(data.lanes)  # distinct
    kinds = [m.kind for m in data.markers]
    assert kinds.count("attempt") == 2 and kinds.count("restart") == 1
    assert kinds.count("crash") == 1 and kinds.count("end") == 1
    restart = next(m for m in data.markers if m.kind == "restart")
    assert f"step {store.played['restart_step']}" in restart.text


def test_errors(tmp_path, store, capsys):
    assert main(["timeline", "syn", "--store", store, "-o", str(tmp_path / "x.jpg")]) == 2
    assert ".png or .html" in capsys.readouterr().err
    assert main(["timeline", "missing", "--store", store, "-o", str(tmp_path / "x.html")]) == 2
    assert "no run named" in capsys.readouterr().err
    assert main(["timeline", "nostart", "--store", store, "-o", str(tmp_path / "x.html")]) == 2
    assert "nothing to draw" in capsys.readouterr().err
    assert main(["timeline", "syn", "--store", store, "-o", str(tmp_path / "x.html"),
                 "--window", "later"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad --window" in err
    missing_dir = tmp_path / "no" / "such" / "dir" / "x.html"
    assert main(["timeline", "syn", "--store", store, "-o", str(missing_dir)]) == 1  # I/O
    assert "cannot write" in capsys.readouterr().err


def test_spans_closer_than_a_pixel_merge_into_one_bar_with_exact_totals():
    EVAL = "CUSTOM_BADPUT_EVENTS:EVAL"
    calc = Calculator("long", clock=lambda: START + 10_000)
    events = [EventRecord("long", int(Kind.JOB_START), START)]
    evals = {"custom_badput_event_type": "eval"}
    for i in range(3000):  # 1.5 s steps, each with a 0.2 s evaluation
        t = START + 1 + 1.5 * i
        events += [EventRecord("long", int(Kind.STEP_START), t, i),
                   EventRecord("long", int(Kind.CUSTOM_BADPUT_START), t + 1, None, evals),
                   EventRecord("long", int(Kind.CUSTOM_BADPUT_END), t + 1.2, None, evals)]
    events.append(EventRecord("long", int(Kind.JOB_END), START + 1 + 1.5 * 3000))
    calc.add(events)
    spans = calc.spans()
    data = collect(calc, pixels=100)
    lanes = {lane.key: lane for lane in data.lanes}
    for key, lane in lanes.items():
        own = [(s, e) for s, e, k in spans if k == key and e > s]
        assert sum(lane.counts) == len(own)  # every span is in exactly one bar
        assert len(lane.starts) <= 100 < len(own) or len(own) <= 100
        assert lane.seconds == pytest.approx(sum(e - s for s, e in own), abs=1e-6)
        assert lane.starts[0] == own[0][0] and lane.ends[-1] == own[-1][1]
    assert len(lanes[EVAL].starts) <= 100 and len(lanes["PRODUCTIVE"].starts) <= 100
    # a fine enough resolution keeps every span apart (gaps of 0.3 s and more)
    fine = {lane.key: lane for lane in collect(calc, pixels=10 ** 6).lanes}
    assert fine[EVAL].counts == [1] * 3000
