"""A run's timeline as a trace: attempts, phases and disruptions.

One trace per run; one span per attempt (job start to its end, or to the next
attempt's start after a crash); under each attempt, one span per *phase*: a
maximal stretch of one category of the attributed timeline (init, prep,
compile, a save, a restore, an evaluation, a hang, recovery, wasted progress,
other...). Productive time is aggregated the same way: one span per
uninterrupted productive stretch with its step range, never one per step, so
a million-step run is as many spans as it has interruptions. Disruptions and
restarts are events on the attempt span they happened in.

Ids are derived from the run (and, for a span, from its kind, attempt and
start time), so exporting the same run twice sends the same ids: backends see
one trace, not two. Nothing here imports OpenTelemetry
(:mod:`goodput_core.exporters.otel_trace` turns these into OTLP spans).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from goodput_core.queries.markers import run_markers

__all__ = ["TraceEvent", "TraceSpan", "phase_spans", "attempt_spans", "trace_id",
           "span_id"]


@dataclasses.dataclass(frozen=True)
class TraceEvent:
    """A point in time on a span: a crash or a restart."""

    t: float
    name: str                      # "disruption" or "restart"
    attributes: Dict[str, Any]


@dataclasses.dataclass(frozen=True)
class TraceSpan:
    """One span of a run's trace.

    Attributes:
      name: ``attempt <n>`` or the phase's category in lower case
        (``productive``, ``unproductive_checkpoint_save_time``, ``custom_badput_events:eval``...).
      label: the category as the calculator labels spans (``PRODUCTIVE``, a
        ``BadputType`` name, ``CUSTOM_BADPUT_EVENTS:<TYPE>``), or ``ATTEMPT``.
      start, end: POSIX seconds.
      attempt: the attempt's index (0-based).
      span_id, parent_id: 64-bit ids (``parent_id`` None for an attempt).
      attributes: ``goodput.*`` attributes (bucket, step range, ...).
      events: disruptions and restarts (attempt spans only).
      closed: False for a stretch or an attempt still going on at the query time.
    """

    name: str
    label: str
    start: float
    end: float
    attempt: int
    span_id: int
    parent_id: Optional[int]
    attributes: Dict[str, Any]
    events: Tuple[TraceEvent, ...] = ()
    closed: bool = True


def _digest(*parts: Any) -> bytes:
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.digest()


def trace_id(run: str) -> int:
    """The run's 128-bit trace id (never 0)."""
    return int.from_bytes(_digest("goodput-trace", run)[:16], "big") or 1


def span_id(run: str, kind: str, attempt: int, start: float) -> int:
    """A span's 64-bit id from what identifies it (never 0; start to the µs)."""
    return int.from_bytes(_digest("goodput-span", run, kind, attempt,
                                  f"{start:.6f}")[:8], "big") or 1


def attempt_spans(calc: Any, now: float) -> List[TraceSpan]:
    """One span per attempt of ``calc``'s run, with its disruptions and restarts.

    An attempt ends at its job end, else at the next attempt's start (a crash),
    else it is open: it ends at the lifetime's end (the query time while the
    run goes on) with ``closed`` False.
    """
    life = calc.lifetime(now)
    if life is None:
        return []
    tl = calc.timeline
    att = tl.attempts
    starts, ends, nexts = att.start.tolist(), att.end.tolist(), att.next_start.tolist()
    events: Dict[int, List[TraceEvent]] = {i: [] for i in range(len(starts))}
    for m in run_markers(calc):
        if m.kind not in ("crash", "restart"):
            continue
        i = max(0, int(np.searchsorted(att.start, m.t, side="right")) - 1)
        if m.kind == "crash":
            attrs = {"goodput.disruption.cause": m.cause or "unknown (no job end)"}
            events[i].append(TraceEvent(m.t, "disruption", attrs))
        else:
            attrs = {} if m.step is None else {"goodput.step": m.step}
            events[i].append(TraceEvent(m.t, "restart", attrs))
    out = []
    for i, (s, e, n) in enumerate(zip(starts, ends, nexts)):
        closed = True
        if math.isnan(e):
            e = n
        if math.isnan(e):
            e, closed = life[1], life[1] < now  # the last attempt: open while the run is
        out.append(TraceSpan(f"attempt {i + 1}", "ATTEMPT", s, max(e, s), i,
                             span_id(calc.run, "attempt", i, s), None,
                             {"goodput.run": calc.run, "goodput.attempt": i + 1},
                             tuple(sorted(events[i], key=lambda ev: ev.t)), closed))
    return out


def phase_spans(calc: Any, now: float, start: float = -math.inf,
                end: float = math.inf) -> List[TraceSpan]:
    """The run's phases inside ``[start, end]`` (clipped to the lifetime).

    Consecutive pieces of one category inside one attempt are one phase;
    idle time between attempts is no phase (the gap between attempt spans
    shows it). The last phase is ``closed`` False when it reaches the query
    time of a run still going on: it may grow.
    """
    life = calc.lifetime(now)
    if life is None:
        return []
    arrays = calc.span_arrays(start, end, now=now)
    labels = [k for k in arrays if k != "IDLE"]
    if not labels:
        return []
    s = np.concatenate([arrays[k][0] for k in labels])
    e = np.concatenate([arrays[k][1] for k in labels])
    code = np.concatenate([np.full(len(arrays[k][0]), i) for i, k in enumerate(labels)])
    order = np.argsort(s, kind="stable")
    s, e, code = s[order], e[order], code[order]
    keep = e > s
    s, e, code = s[keep], e[keep], code[keep]
    if not len(s):
        return []
    tl = calc.timeline
    att_start = tl.attempts.start
    attempt = np.maximum(np.searchsorted(att_start, s, side="right") - 1, 0)
    # a new phase where the category or the attempt changes, or after a gap
    new = np.ones(len(s), bool)
    new[1:] = (code[1:] != code[:-1]) | (attempt[1:] != attempt[:-1]) | (s[1:] > e[:-1] + 1e-9)
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s)) - 1
    ps, pe, pc, pa = s[first], e[last], code[first], attempt[first]
    st = tl.tables["step_start"]
    st_t, st_step = np.asarray(st["t"]), np.asarray(st["step"])
    running = life[1] >= now  # the run goes on: its last phase may still grow
    out = []
    for k in range(len(ps)):
        label = labels[int(pc[k])]
        a, b, i = float(ps[k]), float(pe[k]), int(pa[k])
        attrs: Dict[str, Any] = {"goodput.run": calc.run, "goodput.bucket": label,
                                 "goodput.attempt": i + 1}
        if label == "PRODUCTIVE":
            lo = int(np.searchsorted(st_t, a, side="right")) - 1
            hi = int(np.searchsorted(st_t, b, side="left")) - 1
            if hi >= 0:
                attrs["goodput.step.first"] = int(st_step[max(lo, 0)])
                attrs["goodput.step.last"] = int(st_step[hi])
        closed = not (running and k == len(ps) - 1 and b >= life[1] - 1e-9)
        parent = span_id(calc.run, "attempt", i, float(att_start[i]))
        out.append(TraceSpan(label.lower(), label, a, b, i,
                             span_id(calc.run, label, i, a), parent, attrs, (), closed))
    return out
