"""The lifecycle part of ``goodput report`` and the ``incidents`` command's text.

JSON keys (under ``lifecycle`` and ``incidents``; never NaN or infinity):

==============  ===============================================================
key             value
==============  ===============================================================
``lifecycle``   ``{available, submitted, end, wall_seconds, held_seconds,
                scheduling_seconds, idle_seconds, requeues,
                scheduling_goodput, runtime_goodput, ettr, program_goodput,
                mpg}`` (fractions; ``available`` false without scheduling
                events)
``incidents``   ``{incidents: [{attempt, cause, seen_by, last_progress,
                detected, restarted, first_step, time_to_detect,
                time_to_restart, time_to_first_step, lost_seconds, lost_steps,
                recovery_seconds, scheduling_seconds, open}], mtbf_seconds,
                mttr_seconds, badput_by_cause, badput_by_host, suspect_hosts}``
                (``open``: the run stopped and was not restarted; its
                ``restarted`` and the times to it are null)
==============  ===============================================================
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from goodput_core.cli.timespec import format_duration, format_time
from goodput_core.queries.incidents import incidents
from goodput_core.queries.lifecycle import lifecycle

__all__ = ["lifecycle_report", "lifecycle_table", "incidents_table"]


def lifecycle_report(calc: Any, result: Any) -> Dict[str, Any]:
    """The ``lifecycle`` and ``incidents`` keys of the report."""
    now = result.query_time
    return {"lifecycle": lifecycle(calc, now, result).to_json(),
            "incidents": incidents(calc, now).to_json()}


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.2f} %"


def _dur(x: Optional[float]) -> str:
    return "-" if x is None else format_duration(x)


def lifecycle_table(rep: Dict[str, Any]) -> List[str]:
    """Lines for the report's table (nothing for a run without them)."""
    out: List[str] = []
    lc = rep.get("lifecycle") or {}
    if lc.get("available"):
        out.append("Lifecycle (from submission)")
        out.append(f"  submitted                {format_time(lc['submitted'])}"
                   f"   ({lc['requeues']} requeues)")
        out.append(f"  wall clock               {_dur(lc['wall_seconds'])}")
        out.append(f"  waiting for resources    {_dur(lc['scheduling_seconds'])}")
        out.append(f"  holding the resources    {_dur(lc['held_seconds'])}")
        out.append(f"  scheduling goodput (SG)  {_pct(lc['scheduling_goodput'])}")
        out.append(f"  runtime goodput (RG)     {_pct(lc['runtime_goodput'])}")
        out.append(f"  program goodput (PG)     {_pct(lc['program_goodput'])}"
                   + ("" if lc["program_goodput"] is not None else "   (FLOPs unknown)"))
        out.append(f"  MPG = SG x RG x PG       {_pct(lc['mpg'])}")
        out.append(f"  ETTR                     {_pct(lc['ettr'])}   (= SG x RG)")
    inc = rep.get("incidents") or {}
    if inc.get("incidents"):
        out.extend(incidents_table(inc))
    return out


def incidents_table(inc: Dict[str, Any]) -> List[str]:
    """The incidents as text (one line each, then the run's figures)."""
    out = ["Incidents"]
    for i in inc["incidents"]:
        who = "" if i["seen_by"] is None else f", seen by process {i['seen_by'][0]}" + (
            f" on {i['seen_by'][1]}" if i["seen_by"][1] else "")
        out.append(f"  attempt {i['attempt']}: {i['cause']}{who}")
        if i.get("open"):
            out.append(f"    open: not restarted; known at {format_time(i['detected'])} "
                       f"(detect {_dur(i['time_to_detect'])})")
            continue
        out.append(f"    detect {_dur(i['time_to_detect'])}, restart "
                   f"{_dur(i['time_to_restart'])} (waiting for resources "
                   f"{_dur(i['scheduling_seconds'])}), first step "
                   f"{_dur(i['time_to_first_step'])}; lost {_dur(i['lost_seconds'])} "
                   f"({i['lost_steps']} steps), recovery {_dur(i['recovery_seconds'])}")
    out.append(f"  MTBF {_dur(inc['mtbf_seconds'])}, MTTR {_dur(inc['mttr_seconds'])}")
    for cause, secs in sorted(inc["badput_by_cause"].items(), key=lambda kv: -kv[1]):
        out.append(f"  badput by cause: {cause:<28} {_dur(secs)}")
    for host, secs in sorted(inc["badput_by_host"].items(), key=lambda kv: -kv[1]):
        out.append(f"  badput by host:  {host:<28} {_dur(secs)}")
    for host in inc["suspect_hosts"]:
        out.append(f"  suspect host: {host} saw several disruptions")
    return out
