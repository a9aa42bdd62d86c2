"""The insights part of ``goodput report``: hangs, checkpoint-interval advice
and host outliers (docs/insights.md).

JSON keys (under ``insights``; never NaN or infinity):

===================  ===========================================================
key                  value
===================  ===========================================================
``hangs``            ``[{step, start, detected, end, ended_by, seconds,
                     thread, top_frames}]`` (``end`` null while the hang is
                     open; ``thread``: the thread that recorded the last step,
                     ``top_frames``: its innermost frames, innermost first)
``checkpoint``       ``{available, reason, disruptions, saves, mtbf_seconds,
                     save_seconds, restart_seconds, step_seconds,
                     current_interval_seconds, current_interval_steps,
                     recommended_interval_seconds, recommended_interval_steps,
                     young_interval_seconds, daly_interval_seconds, waste_now,
                     waste_recommended, goodput_gain_points}``
``hosts``            null with fewer than two process indices; else
                     ``{hosts: [{process_index, host_local_seconds,
                     total_seconds, seconds: {BUCKET: s}, median_step_seconds}],
                     median: {...}, outliers: [{process_index, bucket,
                     excess_seconds}]}``
===================  ===========================================================
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Dict, List

from goodput_core.cli.timespec import format_duration, format_time

__all__ = ["insights_report", "insights_table"]

logger = logging.getLogger("goodput")


def insights_report(calc: Any, now: float, *, hosts: bool = True) -> Dict[str, Any]:
    """The ``insights`` key of the report."""
    out: Dict[str, Any] = {
        "hangs": [{"step": h.step, "start": h.start, "detected": h.detected, "end": h.end,
                   "ended_by": h.ended_by, "seconds": h.seconds, "thread": h.thread,
                   "top_frames": h.top_frames()}
                  for h in calc.hangs(now)],
        "checkpoint": dataclasses.asdict(calc.checkpoint_advice(now)),
        "hosts": None,
    }
    if hosts and getattr(calc, "_store", None) is not None:
        b = calc.hosts(now)
        if len(b.hosts) >= 2:
            out["hosts"] = {
                "hosts": [{"process_index": h.process_index,
                           "host_local_seconds": h.host_local_seconds,
                           "total_seconds": h.total_seconds, "seconds": h.seconds,
                           "median_step_seconds": h.median_step_seconds} for h in b.hosts],
                "median": b.median,
                "outliers": [{"process_index": i, "bucket": k, "excess_seconds": x}
                             for i, k, x in b.outliers]}
    return out


def _s(v: Any) -> str:
    return "-" if v is None else f"{v:.1f} s ({format_duration(v)})"


def insights_table(ins: Dict[str, Any]) -> List[str]:
    """Table lines for people."""
    out = []
    hangs = ins.get("hangs") or []
    out.append("Hangs" + ("" if hangs else ": none detected"))
    for h in hangs:
        end = "still hung" if h["end"] is None else f"ended by {h['ended_by']}"
        out.append(f"  step {h['step']}: {_s(h['seconds'])} from {format_time(h['start'])}, "
                   f"{end}")
        if h.get("thread"):
            out.append(f"    thread {h['thread']}, innermost frame first:")
        out.extend(f"      {line.strip()}" for line in h["top_frames"])
    ck = ins.get("checkpoint") or {}
    out.append("Checkpoint interval (seconds of work between saves, the save not in them)")
    if not ck.get("available"):
        out.append(f"  no advice: {ck.get('reason', 'no data')}")
    else:
        steps = (lambda n: "" if n is None else f", {n:.0f} steps")
        out.append(f"  failures {ck['disruptions']} (MTBF {_s(ck['mtbf_seconds'])}), "
                   f"saves {ck['saves']} of {ck['save_seconds']:.2f} s, "
                   f"restart {_s(ck['restart_seconds'])}")
        if ck["current_interval_seconds"] is not None:
            out.append(f"  current interval         {_s(ck['current_interval_seconds'])}"
                       f"{steps(ck['current_interval_steps'])}; expected waste "
                       f"{100 * ck['waste_now']:.2f} %")
        out.append(f"  recommended interval     {_s(ck['recommended_interval_seconds'])}"
                   f"{steps(ck['recommended_interval_steps'])}; expected waste "
                   f"{100 * ck['waste_recommended']:.2f} %"
                   f"   (Young {ck['young_interval_seconds']:.0f} s)")
        if ck["goodput_gain_points"] is not None:
            out.append(f"  goodput to gain          {ck['goodput_gain_points']:.2f} points")
        if ck["reason"]:
            out.append(f"  note: {ck['reason']}")
    hosts = ins.get("hosts")
    if hosts:
        out.append(f"Hosts ({len(hosts['hosts'])}; median host-local time "
                   f"{hosts['median']['host_local_seconds']:.2f} s)")
        for o in hosts["outliers"]:
            out.append(f"  outlier: process {o['process_index']} +{o['excess_seconds']:.2f} s, "
                       f"mostly {o['bucket']}")
        if not hosts["outliers"]:
            out.append("  no outlier")
    return out
