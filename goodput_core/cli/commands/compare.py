"""``goodput compare``: runs side by side, bucket by bucket (a run group or named runs).

Usage::

    goodput compare --group G [--store URL] [--json]
    goodput compare RUN RUN ... [--store URL] [--json]

Each column is one run, computed exactly as ``goodput report RUN`` does over
the run's whole lifetime. Rows: total time, goodput, productive time, every
badput bucket (seconds and percent of the run's total), custom badput types,
disruptions, last and max productive step, median step time, program
goodput (MFU) where known, the latest value of each model metric, and the
configs whose values differ between the runs (nested keys dotted).

``--json`` prints one object: ``group`` (or null), ``store``, ``runs`` (the
``goodput report --json`` object of each run, plus its ``run_group``) and
``configs_differ`` (``{dotted key: [value per run, null where absent]}``).

``goodput runs --group G`` (see :func:`list_group`) is the short listing: one
line per run with goodput, total time, disruptions and last step.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from goodput_core.cli import CliError
from goodput_core.cli.commands.common import add_store_argument
from goodput_core.cli.commands.report import build_report, state_line, state_report
from goodput_core.queries.calculator import Calculator
from goodput_core.queries.run_groups import RUN_GROUP_KEY, group_of
from goodput_core.queries.summaries import runs_in_group
from goodput_core.cli.timespec import format_duration
from goodput_core.stores import open_store

__all__ = ["add_arguments", "run", "compare_reports", "format_comparison", "list_group"]

_ASYNC = "DATA_LOADING_ASYNC"


def add_arguments(parser) -> None:
    parser.add_argument("runs", nargs="*", metavar="RUN", help="runs to compare (or --group)")
    parser.add_argument("--group", default=None, metavar="G",
                        help="compare every run whose run_group is G")
    add_store_argument(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object for scripts")


def _calcs(store, names: Sequence[str], group: Optional[str]) -> List[Tuple[str, Any]]:
    if group is not None:
        found = runs_in_group(store, group)
        if not found:
            raise CliError(f"no run in group {group!r} in {store.url} "
                           "(see: goodput runs --group G)")
        return found
    known = set(store.runs())
    out = []
    for name in names:
        if name not in known:
            raise CliError(f"no run named {name!r} in {store.url} (see: goodput runs)")
        calc = Calculator(name, store)
        calc.refresh()
        out.append((name, calc))
    return out


def _report(calc, store_url: str, now: float) -> Dict[str, Any]:
    result = calc.window(-math.inf, math.inf, now=now)
    rep = build_report(calc, result, calc.step_stats(incremental=False), store_url=store_url,
                       window_spec=None, exclude=[])
    rep[RUN_GROUP_KEY] = group_of(calc)
    return rep


def _flatten(value: Any, prefix: str = "", out: Optional[dict] = None) -> Dict[str, Any]:
    out = {} if out is None else out
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix] = value
    return out


def _configs_differ(calcs: Sequence[Tuple[str, Any]]) -> Dict[str, List[Any]]:
    flat = [_flatten(calc.metadata().get("configs") or {}) for _, calc in calcs]
    keys = sorted(set().union(*flat)) if flat else []
    out = {}
    for key in keys:
        values = [f.get(key) for f in flat]
        if any(v != values[0] for v in values[1:]):
            out[key] = values
    return out


def compare_reports(store, names: Sequence[str] = (), group: Optional[str] = None,
                    now: Optional[float] = None) -> Dict[str, Any]:
    """The comparison as a JSON-ready dict (keys in the module docstring).

    Raises:
      CliError: no run found (an unknown name, or an empty group).
    """
    if (group is None) == (not names):
        raise CliError("give either run names or --group G")
    now = time.time() if now is None else now
    calcs = _calcs(store, names, group)
    return {
        "group": group,
        "store": store.url,
        "runs": [_report(calc, store.url, now) for _, calc in calcs],
        "configs_differ": _configs_differ(calcs),
    }


# ------------------------------------------------------------------ table
def _secs_pct(secs: Optional[float], pct: Optional[float]) -> str:
    if secs is None:
        return "-"
    text = f"{secs:.3f} s" if abs(secs) < 100 else f"{secs:.1f} s"
    return text + ("" if pct is None else f" {pct:5.1f}%")


def _num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def format_comparison(cmp: Dict[str, Any]) -> str:
    """The comparison as a table for people: one column per run."""
    reps = cmp["runs"]
    rows: List[Tuple[str, List[str]]] = []

    def row(label: str, cells: List[str]) -> None:
        rows.append((label, cells))

    row("run_group", [r[RUN_GROUP_KEY] or "-" for r in reps])
    row("lifetime", [format_duration(r["lifetime"]["seconds"]) for r in reps])
    row("total time", [_secs_pct(r["total_seconds"], None) for r in reps])
    row("goodput", [f"{r['goodput_percent']:.2f} %" for r in reps])
    row("PRODUCTIVE", [_secs_pct(r["productive_seconds"], r["goodput_percent"]) for r in reps])
    buckets = list(reps[0]["badput_seconds"])
    for r in reps[1:]:  # elastic buckets appear only in elastic runs
        buckets += [b for b in r["badput_seconds"] if b not in buckets]
    buckets = [b for b in buckets if b != _ASYNC] + [_ASYNC]  # not in total: last, as the report
    for b in buckets:
        label = b + (" (not in total)" if b == _ASYNC else "")
        row(label, [_secs_pct(r["badput_seconds"].get(b), r["badput_percent"].get(b))
                    for r in reps])
        if b == "CUSTOM_BADPUT_EVENTS":
            kinds = sorted({k for r in reps for k in r["custom_badput_seconds"]})
            for k in kinds:
                row(f"  {k}", [_secs_pct(r["custom_badput_seconds"].get(k),
                                         r["custom_badput_percent"].get(k)) for r in reps])
    row("disruptions", [str(r["disruptions"]) for r in reps])
    row("last step", [_num(r["last_step"]) for r in reps])
    row("max productive step", [_num(r["max_productive_step"]) for r in reps])
    row("median step time", [_secs_pct(r["step_time"]["median_seconds"], None) for r in reps])
    if any(r["program_goodput"] for r in reps):
        row("program goodput (MFU)", [
            "-" if not r["program_goodput"] else f"{100 * r['program_goodput']['mfu']:.2f} %"
            for r in reps])
    for name in sorted({m for r in reps for m in r["metrics"]}):
        row(f"metric {name}", [_num(r["metrics"][name]["value"]) if name in r["metrics"]
                               else "-" for r in reps])
    for key, values in cmp["configs_differ"].items():
        row(f"config {key}", [_num(v) for v in values])
    width = max(len(label) for label, _ in rows)
    cols = [max([len(r["run"])] + [len(cells[i]) for _, cells in rows])
            for i, r in enumerate(reps)]
    title = "Group " + repr(cmp["group"]) if cmp["group"] is not None else "Runs"
    out = [f"{title}   (store {cmp['store']}, whole lifetime of each run)", ""]
    out.append("  " + " " * width + "".join(f"  {r['run']:>{w}}" for r, w in zip(reps, cols)))
    for label, cells in rows:
        out.append(f"  {label:<{width}}" + "".join(f"  {c:>{w}}" for c, w in zip(cells, cols)))
    return "\n".join(out)


def run(args) -> int:
    store = open_store(args.store, create=False)
    cmp = compare_reports(store, args.runs, args.group)
    if args.json:
        sys.stdout.write(json.dumps(cmp, allow_nan=False) + "\n")
    else:
        sys.stdout.write(format_comparison(cmp) + "\n")
    return 0


# --------------------------------------------------------- goodput runs --group
def list_group(store, group: str, as_json: bool = False, now: Optional[float] = None) -> int:
    """``goodput runs --group G``: each run of the group with goodput, total
    time, disruptions, last step and state (JSON: ``{group, store, runs: [{run,
    goodput_percent, total_seconds, disruptions, last_step, state}]}``, ``state``
    as in ``goodput report --json``). An empty group prints nothing (an empty
    list with ``--json``)."""
    now = time.time() if now is None else now
    rows = []
    for name, calc in runs_in_group(store, group):
        result = calc.cumulative(now)
        rows.append({"run": name, "goodput_percent": result.goodput,
                     "total_seconds": result.total_seconds,
                     "disruptions": result.disruptions, "last_step": result.last_step,
                     "state": state_report(calc.state(now))})
    if as_json:
        sys.stdout.write(json.dumps({"group": group, "store": store.url, "runs": rows},
                                    allow_nan=False) + "\n")
        return 0
    if not rows:
        return 0
    width = max(len("run"), *(len(r["run"]) for r in rows))
    print(f"{'run':<{width}}  {'goodput':>9}  {'total time':>12}  {'disruptions':>11}  "
          f"{'last step':>9}  state")
    for r in rows:
        print(f"{r['run']:<{width}}  {r['goodput_percent']:>7.2f} %  "
              f"{format_duration(r['total_seconds']):>12}  {r['disruptions']:>11}  "
              f"{_num(r['last_step']):>9}  {state_line(r['state'])}")
    return 0
