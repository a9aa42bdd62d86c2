"""``goodput timeline RUN -o FILE.png|FILE.html``: the attributed spans drawn over time.

One lane per category (productive, each badput bucket present, each custom
event type), attempt starts, job ends, crashes and restarts marked; the data
and the matplotlib drawing are in :mod:`goodput_core.cli.plot_timeline`. A PNG
(or SVG/PDF) needs matplotlib (the ``plot`` extra). The HTML variant is
written here and needs nothing: one self-contained page with an inline SVG
(no scripts, no external URLs), one ``<g class="lane"
data-category="LABEL">`` per category and a hover title on every bar.
``--window`` takes the syntax of ``goodput report``
(:mod:`goodput_core.cli.timespec`).
"""

from __future__ import annotations

import html
import os
import time
from typing import List

import goodput_core.cli.plot_timeline as pt
from goodput_core.cli import CliError, CliIOError
from goodput_core.cli.commands.common import add_store_argument
from goodput_core.cli.commands.report import open_run, resolve_window
from goodput_core.cli.timespec import format_duration, format_time
from goodput_core.files import replaced_atomically

__all__ = ["add_arguments", "run", "html_page", "render_html"]

_IMAGE_SUFFIXES = (".png", ".svg", ".pdf")
_HTML_SUFFIXES = (".html", ".htm")


def add_arguments(parser) -> None:
    parser.add_argument("run", help="run (job) name")
    parser.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="the picture to write: FILE.png (matplotlib) or FILE.html")
    add_store_argument(parser)
    parser.add_argument(
        "--window", default=None, metavar="SPEC",
        help="the last N (30s, 15m, 1h, 2d) ending at the run's end or now, or START/END "
             "(ISO-8601, naive = local time, or POSIX seconds)")


def run(args) -> int:
    ext = os.path.splitext(args.output)[1].lower()
    if ext not in _IMAGE_SUFFIXES + _HTML_SUFFIXES:
        # checked first: a typo should not cost reading a large run
        raise CliError(f"cannot draw {args.output!r}: the output must end in .png or .html "
                       f"(or .svg, .pdf)")
    now = time.time()
    calc, _store = open_run(args.run, args.store)
    a, b = resolve_window(calc, args.window, now)
    data = pt.collect(calc, a, b, now=now)
    if not data.spans:
        raise CliError(f"nothing to draw: the window {args.window!r} holds none of the "
                       f"lifetime of run {args.run!r}" if args.window else
                       f"nothing to draw: run {args.run!r} has no job start")
    try:
        if ext in _HTML_SUFFIXES:
            render_html(data, args.output)
        else:
            pt.render_image(data, args.output)
    except pt.PlotUnavailable as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliIOError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"wrote {args.output}: {len(data.lanes)} lanes, {len(data.markers)} markers, "
          f"goodput {data.goodput:.1f} %")
    return 0


# ------------------------------------------------------------------ HTML
def render_html(data: pt.TimelineData, path: str) -> None:
    """Writes a self-contained HTML page (inline SVG, hover titles, no URLs),
    0600, replacing ``path`` atomically (:mod:`goodput_core.files`)."""
    with replaced_atomically(path) as f:
        f.write(html_page(data))


def html_page(data: pt.TimelineData) -> str:
    """The HTML page as a string (see :func:`render_html`)."""
    esc = html.escape
    a, b = data.window
    span = max(b - a, 1e-9)
    left, plot_w, lane_h, top = 330, 900, 30, 84  # top: room for three marker label rows
    n = len(data.lanes)
    height = top + (n + 1) * lane_h + 40
    px = lambda t: left + (t - a) / span * plot_w  # noqa: E731
    rel = lambda t: format_duration(t - data.t0)  # noqa: E731
    parts: List[str] = []
    head, sub = pt.titles(data)

    def rects(lane: pt.Lane, y: float, h: float, min_w: float) -> None:
        # collect() merged the spans closer than a pixel already
        for s, e, count in zip(lane.starts, lane.ends, lane.counts):
            w = max(px(e) - px(s), min_w)  # keep sub-pixel spans visible
            merged = f", {count} spans" if count > 1 else ""
            tip = (f"{lane.name}: +{rel(s)} → +{rel(e)} ({e - s:,.3f} s){merged}\n"
                   f"{format_time(s)} → {format_time(e)}")
            parts.append(f'<rect x="{px(s):.2f}" y="{y:.1f}" width="{w:.2f}" height="{h}" '
                         f'fill="{lane.colour}"><title>{esc(tip)}</title></rect>')

    # overview strip (not a category lane)
    parts.append('<g class="overview">')
    parts.append(f'<text x="{left - 8}" y="{top + lane_h / 2 + 4}" text-anchor="end" '
                 f'font-weight="bold">All (goodput {data.goodput:.1f} %)</text>')
    for lane in data.lanes:
        rects(lane, top + 3, lane_h - 6, min_w=0.5)
    parts.append("</g>")
    for i, lane in enumerate(data.lanes):
        y = top + (i + 1) * lane_h
        pct = "not in total" if lane.percent is None else f"{lane.percent:.1f} %"
        label = f"{lane.name} — {lane.seconds:,.1f} s · {pct}"
        parts.append(f'<g class="lane" data-category="{esc(lane.key)}">'
                     f"<title>{esc(label)}</title>")
        if i % 2 == 0:
            parts.append(f'<rect x="{left}" y="{y}" width="{plot_w}" height="{lane_h}" '
                         f'fill="#f4f4f4"/>')
        parts.append(f'<text x="{left - 8}" y="{y + lane_h / 2 + 4}" text-anchor="end">'
                     f"{esc(label)}</text>")
        rects(lane, y + 5, lane_h - 10, min_w=1.5)
        parts.append("</g>")
    bottom = top + (n + 1) * lane_h
    for t in pt.nice_ticks(a, b, data.t0):  # x axis: time since job start and wall clock
        parts.append(f'<line x1="{px(t):.1f}" y1="{bottom}" x2="{px(t):.1f}" y2="{bottom + 5}" '
                     f'stroke="#555"/><text x="{px(t):.1f}" y="{bottom + 18}" '
                     f'text-anchor="middle" font-size="11">+{esc(rel(t))}</text>'
                     f'<text x="{px(t):.1f}" y="{bottom + 31}" text-anchor="middle" '
                     f'font-size="10" fill="#666">{esc((format_time(t) or "")[11:19])}</text>')
    xs = [px(m.t) for m in data.markers]
    right = left + plot_w * 0.85
    for m, xm, lvl in zip(data.markers, xs, pt.stagger(xs, 170, right)):
        colour, style = pt.MARKER_STYLE.get(m.kind, ("#333", "-"))
        dash = {"--": ' stroke-dasharray="6 3"', ":": ' stroke-dasharray="2 3"'}.get(style, "")
        ty = top - 46 + 14 * lvl
        tx, anchor = (xm - 3, "end") if xm > right else (xm + 3, "start")
        parts.append(f'<g class="marker" data-kind="{m.kind}"><title>{esc(m.text)} at '
                     f'{esc(format_time(m.t) or "")} (+{esc(rel(m.t))})</title>'
                     f'<line x1="{xm:.1f}" y1="{ty - 10}" x2="{xm:.1f}" '
                     f'y2="{bottom}" stroke="{colour}" stroke-width="1.3"{dash}/>'
                     f'<text x="{tx:.1f}" y="{ty}" font-size="10" text-anchor="{anchor}" '
                     f'fill="{colour}">{esc(m.text)}</text></g>')
    svg = (f'<svg width="{left + plot_w + 50}" height="{height}" '
           f'font-family="sans-serif" font-size="12">' + "".join(parts) + "</svg>")
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{esc(head)}</title></head>\n<body style=\"font-family:sans-serif\">"
            f"<h2>{esc(head)}</h2><p>{esc(sub)}</p>\n"
            + "".join(f'<p class="insight"><b>{esc(n)}</b></p>\n' for n in data.notes)
            + f"{svg}\n"
            "<p style=\"color:#666;font-size:12px\">Hover a bar for its times. "
            "Lines: attempt starts and job ends (black), crashes and restarts (red).</p>"
            "</body></html>\n")
