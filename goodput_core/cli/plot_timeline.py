"""Timeline pictures: a run's attributed spans drawn over time.

:func:`collect` turns a :class:`~goodput_core.queries.calculator.Calculator` into a
:class:`TimelineData` (lanes of spans, markers, totals) with no plotting
library; :func:`render_image` draws it with matplotlib into a PNG (or
SVG/PDF). matplotlib is imported only inside :func:`render_image` (with the
Agg backend: no display needed), so importing this module is cheap and works
without the ``plot`` extra. The dependency-free HTML variant (inline SVG)
lives in :mod:`goodput_core.cli.commands.timeline` and shares the helpers here
(:func:`titles`, :func:`stagger`, :func:`nice_ticks`, :data:`MARKER_STYLE`).

The picture: one horizontal lane per category present (productive first,
then the badput buckets in BadputType order with each custom event type in
its own lane, OTHER, then idle time between attempts), plus an overview
lane on top with everything in one strip. Each lane's label carries its
total seconds and percent of total time. Vertical lines mark attempt starts,
job ends, disruptions (crashes) and restarts. Colours are fixed per bucket
(productive green, idle light grey) so pictures of different runs compare.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import math
import os
import zlib
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from goodput_core.timeline.buckets import BadputType
from goodput_core.cli.timespec import format_duration, format_time
from goodput_core.files import replaced_atomically
from goodput_core.queries.markers import Marker, run_markers

__all__ = ["TimelineData", "Lane", "Marker", "PlotUnavailable", "collect", "render_image",
           "COLOURS", "MARKER_STYLE", "lane_name", "titles", "stagger", "nice_ticks",
           "insight_notes"]

CUSTOM_PREFIX = "CUSTOM_BADPUT_EVENTS:"
#: Fixed colours per category (matplotlib's tab10/tab20 hues, chosen so that
#: neighbouring lanes differ and the bad-news buckets are warm colours).
COLOURS: Dict[str, str] = {
    "PRODUCTIVE": "#2ca02c",
    "TPU_INITIALIZATION": "#1f77b4",
    "TRAINING_PREP": "#17becf",
    "PROGRAM_STARTUP": "#9467bd",
    "DATA_LOADING_SYNC": "#bcbd22",
    "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": "#ff7f0e",
    "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": "#f2c14e",
    "WASTED_PROGRESS_FROM_DISRUPTION": "#d62728",
    "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": "#8c564b",
    "OTHER": "#6f6f6f",
    "ELASTIC_SLICE_DOWN": "#393b79",
    "ELASTIC_SCALE_UP": "#6b6ecf",
    "ELASTIC_REINITIALIZATION": "#9c9ede",
    "HANG": "#000000",
    "IDLE": "#d4d4d4",
}
# custom event types: pinks and purples, picked by a stable hash of the type
# name so that e.g. EVAL has the same colour in every picture
_CUSTOM_COLOURS = ("#e377c2", "#c51b7d", "#f4a6d7", "#a55194", "#ce6dbd", "#7b4173")
_SPARE_COLOURS = ("#637939", "#8c6d31", "#843c39", "#3182bd")  # buckets added later
_NAMES = {
    "PRODUCTIVE": "Productive",
    "TPU_INITIALIZATION": "Accelerator init",
    "TRAINING_PREP": "Training prep",
    "PROGRAM_STARTUP": "Program startup (compile)",
    "DATA_LOADING_SYNC": "Data loading (blocking)",
    "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": "Checkpoint save",
    "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": "Checkpoint restore",
    "WASTED_PROGRESS_FROM_DISRUPTION": "Wasted progress",
    "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": "Recovery from disruption",
    "OTHER": "Other (unlabelled)",
    "ELASTIC_SLICE_DOWN": "Elastic slice down",
    "ELASTIC_SCALE_UP": "Elastic scale up",
    "ELASTIC_REINITIALIZATION": "Elastic re-init",
    "HANG": "Hang (no progress)",
    "IDLE": "Idle between attempts",
}
#: marker kind -> (colour, matplotlib line style)
MARKER_STYLE = {
    "attempt": ("#1a1a1a", "--"),
    "end": ("#1a1a1a", ":"),
    "crash": ("#b2182b", "-"),
    "restart": ("#b2182b", "--"),
    "duty_cycle_drop": ("#d9822b", "-."),
}


PIXELS = 2000  # bars closer than 1/PIXELS of the window merge (both pictures are narrower)


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed (the ``plot`` extra)."""


@dataclasses.dataclass
class Lane:
    """One category's spans (POSIX seconds) and totals."""

    key: str                 # the span label: PRODUCTIVE, IDLE, a bucket, CUSTOM_...:<TYPE>
    name: str                # for people
    colour: str
    starts: List[float]
    ends: List[float]
    seconds: float
    percent: Optional[float]  # of total time; None for idle (not part of it)
    counts: List[int] = dataclasses.field(default_factory=list)  # spans merged into each


@dataclasses.dataclass
class TimelineData:
    """Everything a picture needs, independent of the drawing library."""

    run: str
    goodput: float
    total_seconds: float
    productive_seconds: float
    disruptions: int
    window: Tuple[float, float]
    t0: float                                   # job start: x = t - t0
    lanes: List[Lane]
    markers: List[Marker]
    spans: List[Tuple[float, float, str]]       # every lane's bars, in time order
    notes: List[str] = dataclasses.field(default_factory=list)  # hangs, checkpoint advice


def lane_name(key: str) -> str:
    """A category's name for people."""
    if key.startswith(CUSTOM_PREFIX):
        return f"Custom: {key[len(CUSTOM_PREFIX):].lower()}"
    return _NAMES.get(key, key.replace("_", " ").capitalize())


def _colour(key: str, used: Sequence[str]) -> str:
    if key in COLOURS:
        return COLOURS[key]
    palette = _CUSTOM_COLOURS if key.startswith(CUSTOM_PREFIX) else _SPARE_COLOURS
    i = zlib.crc32(key.encode()) % len(palette)
    for k in range(len(palette)):  # avoid two custom lanes sharing a colour
        c = palette[(i + k) % len(palette)]
        if c not in used:
            return c
    return palette[i]


def _order(key: str) -> Tuple[int, str]:
    """Lane order: productive, buckets by number (custom types at 10), other, idle."""
    if key == "PRODUCTIVE":
        return (0, "")
    if key == "IDLE":
        return (1000, "")
    if key == "OTHER":
        return (999, "")
    if key.startswith(CUSTOM_PREFIX):
        return (int(BadputType.CUSTOM_BADPUT_EVENTS), key)
    try:
        return (int(BadputType[key]), "")
    except KeyError:
        return (500, key)


def collect(calc, start: float = -math.inf, end: float = math.inf,
            now: Optional[float] = None, pixels: int = PIXELS) -> TimelineData:
    """The picture's data for ``calc``'s run over ``[start, end]``.

    Spans of a lane closer than one pixel (``1/pixels`` of the window) are
    merged into one bar (``Lane.counts`` says how many), so a run of ten
    million events draws as fast as a short one; lane totals are exact.

    Args:
      calc: a refreshed Calculator.
      start, end: the window (POSIX seconds; clipped to the lifetime).
      now: the query time (default: the calculator's clock).
      pixels: the resolution the bars are merged to.
    """
    result = calc.window(start, end, now=now)
    by_key: Dict[str, Lane] = {}
    gap = 0.0
    if all(math.isfinite(x) for x in result.window):
        gap = (result.window[1] - result.window[0]) / max(int(pixels), 1)
    bars: List[Tuple[float, float, str]] = []
    for key, (s, e) in sorted(calc.span_arrays(start, end, now=now).items()):
        keep = e > s
        s, e = s[keep], e[keep]
        if not len(s):
            continue
        colour = _colour(key, [ln.colour for ln in by_key.values()])
        ms, me, counts = _merge(s, e, gap)
        lane = by_key[key] = Lane(key, lane_name(key), colour, ms, me, float((e - s).sum()),
                                  None, counts)
        bars.extend(zip(ms, me, itertools.repeat(key)))
    bars.sort(key=lambda bar: bar[0])
    total = result.total_seconds
    for lane in by_key.values():
        if lane.key != "IDLE":
            lane.percent = 100.0 * lane.seconds / total if total > 0 else 0.0
    lanes = sorted(by_key.values(), key=lambda ln: _order(ln.key))
    life = result.lifetime
    t0 = life[0] if math.isfinite(life[0]) else 0.0
    window = result.window if all(math.isfinite(x) for x in result.window) else (t0, t0)
    return TimelineData(
        run=calc.run or "", goodput=result.goodput, total_seconds=total,
        productive_seconds=result.productive_seconds, disruptions=result.disruptions,
        window=window, t0=t0, lanes=lanes, markers=run_markers(calc, *window), spans=bars,
        notes=insight_notes(calc, now))


def _merge(s: np.ndarray, e: np.ndarray, gap: float) -> Tuple[List[float], List[float], List[int]]:
    """Disjoint sorted spans merged where the space between two is below
    ``gap``: ``(starts, ends, spans per merged bar)``."""
    new = np.ones(len(s), bool)
    new[1:] = s[1:] - e[:-1] >= gap if gap > 0 else True
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s)) - 1
    counts = np.diff(np.append(first, len(s)))
    return s[first].tolist(), e[last].tolist(), counts.tolist()


def insight_notes(calc, now: Optional[float] = None) -> List[str]:
    """One line per insight worth a look: hangs and checkpoint-interval advice."""
    notes = []
    hangs = calc.hangs(now)
    if hangs:
        total = sum(h.seconds for h in hangs)
        steps = ", ".join(str(h.step) for h in hangs[:5])
        notes.append(f"Hangs: {len(hangs)} ({format_duration(total)}; at step {steps})")
    advice = calc.checkpoint_advice(now)
    if advice.available:
        now_part = ("" if advice.current_interval_seconds is None else
                    f" (now every {format_duration(advice.current_interval_seconds)})")
        gain = ("" if advice.goodput_gain_points is None else
                f": {advice.goodput_gain_points:+.2f} goodput points")
        notes.append(f"Checkpoint every {format_duration(advice.recommended_interval_seconds)}"
                     f"{now_part}{gain}" + (f" [{advice.reason}]" if advice.reason else ""))
    return notes


# ---------------------------------------------------------------- helpers
def _lane_label(lane: Lane) -> str:
    pct = "not in total" if lane.percent is None else f"{lane.percent:.1f} %"
    return f"{lane.name}\n{lane.seconds:,.1f} s · {pct}"


def titles(data: TimelineData) -> Tuple[str, str]:
    head = f"{data.run} — goodput {data.goodput:.1f} %"
    a, b = data.window
    sub = (f"{format_duration(data.productive_seconds)} productive of "
           f"{format_duration(data.total_seconds)} total · {data.disruptions} "
           f"disruption{'s' if data.disruptions != 1 else ''} · "
           f"{format_time(a)} → {format_time(b)} (UTC)")
    return head, sub


def _unit(span_s: float) -> Tuple[float, str]:
    """A readable unit for the relative time axis."""
    for limit, div, name in ((300, 1, "s"), (3 * 3600, 60, "min"), (3 * 86400, 3600, "h")):
        if span_s <= limit:
            return div, name
    return 86400, "days"


def stagger(xs: Sequence[float], label_w: float, right_from: float,
             levels: int = 3) -> List[int]:
    """A text level per marker so that labels close in x do not overlap.

    A label at ``x`` covers ``[x, x + label_w]``, or ``[x - label_w, x]``
    from ``right_from`` on (labels near the right edge grow leftwards).
    """
    busy_until = [-math.inf] * levels
    out = []
    for x in xs:
        lo, hi = (x - label_w, x) if x > right_from else (x, x + label_w)
        lvl = next((k for k in range(levels) if lo >= busy_until[k]), None)
        if lvl is None:  # all levels busy: reuse the one freed first
            lvl = min(range(levels), key=lambda k: busy_until[k])
        busy_until[lvl] = hi
        out.append(lvl)
    return out


_NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 3 * 3600,
               6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400)


def nice_ticks(a: float, b: float, t0: float, target: int = 6) -> List[float]:
    """Round positions (in time since ``t0``) for about ``target`` ticks in ``[a, b]``."""
    span = b - a
    if span <= 0:
        return [a]
    raw = span / target
    step = next((s for s in _NICE_STEPS if s >= raw), None)
    if step is None:  # longer than weeks: whole multiples of a week
        step = 7 * 86400 * math.ceil(raw / (7 * 86400))
    if raw < 1:  # sub-second windows: 1-2-5 steps below a second
        step = 10 ** math.floor(math.log10(raw))
        step *= next(m for m in (1, 2, 5, 10) if step * m >= raw)
    k = math.ceil((a - t0) / step - 1e-9)
    out = []
    while t0 + k * step <= b + 1e-9 * step:
        out.append(t0 + k * step)
        k += 1
    return out


def _clock(t: float, span_s: float) -> str:
    """Wall-clock tick label (UTC), as precise as the window needs."""
    when = datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
    if span_s < 10:
        return when.strftime("%H:%M:%S.%f")[:-3]
    return when.strftime("%H:%M:%S" if span_s < 86400 else "%m-%d %H:%M")


# ------------------------------------------------------------------- PNG
def render_image(data: TimelineData, path: str) -> None:
    """Draws ``data`` with matplotlib (Agg) into ``path`` (PNG, SVG or PDF)."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)  # files only: never open a window
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FixedLocator, FuncFormatter
    except ImportError as exc:
        raise PlotUnavailable(
            f"drawing {os.path.basename(path)} needs matplotlib: pip install 'goodput-core[plot]' "
            f"(or write .html, which needs nothing) ({exc})") from None

    a, b = data.window
    width = max(b - a, 1e-9)
    div, unit = _unit(b - data.t0)
    x = lambda t: (t - data.t0) / div  # noqa: E731
    n = len(data.lanes)
    rows = n + 1                       # + the overview lane on top
    band = 1.1                         # room above the lanes for marker labels
    fig_h = 1.5 + 0.52 * rows + 0.5
    fig, ax = plt.subplots(figsize=(13, fig_h), dpi=110)
    fig.subplots_adjust(left=0.2, right=0.98, top=1 - 1.05 / fig_h, bottom=0.75 / fig_h)

    def bars(y: float, starts, ends, colour, height=0.72, min_w=0.0):
        # a minimum width keeps sub-pixel spans (a 0.1 s load in a day) visible
        segs = [(x(s), max(x(e) - x(s), min_w)) for s, e in zip(starts, ends)]
        ax.broken_barh(segs, (y - height / 2, height), facecolors=colour,
                       edgecolor="none", linewidth=0)

    # overview: every category in one strip
    for lane in data.lanes:
        bars(n, lane.starts, lane.ends, lane.colour, height=0.82)
    for i, lane in enumerate(data.lanes):
        y = n - 1 - i
        ax.axhspan(y - 0.5, y + 0.5, color="#f4f4f4" if i % 2 == 0 else "white", zorder=0)
        bars(y, lane.starts, lane.ends, lane.colour, min_w=width / div * 0.002)
    ax.set_yticks(range(rows))
    labels = [_lane_label(ln) for ln in reversed(data.lanes)]
    ax.set_yticklabels(labels + [f"All (goodput {data.goodput:.1f} %)"], fontsize=8.5)
    ax.get_yticklabels()[-1].set_fontweight("bold")
    ax.axhline(n - 0.5, color="#888888", linewidth=0.8)
    ax.set_ylim(-0.5, n + 0.5 + band)
    ax.set_xlim(x(a), x(b))
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel(f"time since job start ({unit})   ·   top axis: wall clock (UTC)")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)

    # wall-clock axis on top (same positions, other labels)
    top = ax.secondary_xaxis("top")
    # round wall-clock times (multiples since the epoch: whole minutes, hours, days UTC)
    top.xaxis.set_major_locator(FixedLocator([x(t) for t in nice_ticks(a, b, 0.0, target=7)]))
    top.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _clock(data.t0 + v * div, b - a)))
    top.tick_params(labelsize=8, colors="#444444")

    # markers: full-height lines, labels staggered in the band above the lanes
    xs = [x(m.t) for m in data.markers]
    right = x(a) + (x(b) - x(a)) * 0.85
    levels = stagger(xs, (x(b) - x(a)) * 0.16, right)
    for m, xm, lvl in zip(data.markers, xs, levels):
        colour, style = MARKER_STYLE.get(m.kind, ("#333333", "-"))
        ax.axvline(xm, color=colour, linestyle=style, linewidth=1.1, zorder=3)
        near_end = xm > right  # labels near the right edge grow leftwards, not off the page
        ax.text(xm, n + 0.55 + band * (0.1 + 0.27 * lvl), f" {m.text} ", fontsize=7.5,
                color=colour, ha="right" if near_end else "left", va="bottom", zorder=4,
                bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85))
    head, sub = titles(data)
    fig.suptitle(head, x=0.02, ha="left", fontsize=13, fontweight="bold",
                 y=1 - 0.12 / fig_h)
    # hangs and checkpoint advice on a second line; each line cut to the page
    # (9-point text: about 5 points a character)
    width = max(40, int(fig.get_figwidth() * 72 * 0.96 / 5.2))
    lines = [sub] + (["   |   ".join(data.notes)] if data.notes else [])
    sub = "\n".join(line if len(line) <= width else line[:width - 1] + "\u2026"
                     for line in lines)
    fig.text(0.02, 1 - 0.32 / fig_h, sub, fontsize=9, color="#444444", ha="left", va="top")

    try:  # 0600, replacing the path atomically; the format from its extension
        fmt = os.path.splitext(path)[1].lstrip(".").lower() or "png"
        with replaced_atomically(path, binary=True) as out:
            fig.savefig(out, format=fmt)
    finally:
        plt.close(fig)
