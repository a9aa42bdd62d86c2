"""``goodput report RUN``: goodput, every badput bucket, steps and step times,
program goodput (MFU), slice efficiency and the latest model metrics.

Usage::

    goodput report RUN [--store URL] [--window SPEC] [--exclude A/B ...] [--json]

``--window`` is a duration (``30s``, ``15m``, ``1h``, ``2d``: the last N,
ending at the run's end, or now while its last attempt is open) or an
interval ``START/END`` (ISO-8601 datetimes, naive = local time, or POSIX seconds);
``--exclude START/END`` (repeatable) removes intervals from every bucket and
from total time. The syntax is :mod:`goodput_core.cli.timespec`'s.

Without ``--json`` a table is printed for people. With ``--json`` one JSON
object is printed; its keys are stable (scripts rely on them) and it never
holds NaN or infinity (``null`` instead):

=============================  ==============================================
key                            value
=============================  ==============================================
``run``                        the run name
``store``                      the store URL
``query_time``                 the POSIX time the report was computed at
``lifetime``                   ``{start, end, start_iso, end_iso, seconds}``
                               (first job start to last job end or now;
                               nulls before any job start)
``window``                     ``{spec, start, end, start_iso, end_iso}``: the
                               effective window, clipped to the lifetime
                               (``spec`` null without ``--window``)
``exclude``                    ``[[start, end], ...]`` as given
``goodput_percent``            productive / total × 100
``productive_seconds``         time spent on progress that was kept
``total_seconds``              lifetime in the window minus idle and excluded
``idle_seconds``               between an attempt's job end and the next start
``excluded_seconds``           removed by ``--exclude`` (inside the window)
``scheduling_seconds``         waits for resources after a requeue (not in total)
``badput_seconds``             ``{BUCKET: seconds}``, BadputType names: the
                               ten base buckets of the partition always
                               (``DATA_LOADING_ASYNC`` is not one: see
                               below), elastic ones when the run has elastic
                               events. ``productive_seconds`` + the sum of
                               these = ``total_seconds``
``badput_percent``             ``{BUCKET: percent of total}``, same keys
``custom_badput_seconds``      ``{TYPE: seconds}`` (upper-cased event types;
                               their sum is ``CUSTOM_BADPUT_EVENTS``)
``custom_badput_percent``      ``{TYPE: percent of total}``
``data_loading_async_seconds`` loads overlapped by steps: an annotation,
                               not part of the partition (that time is also
                               productive or another bucket)
``data_loading_async_percent`` the same in percent of total
``data_loading_blocking_default`` ``{seconds, how_to_change}``: the seconds of
                               the window covered by loads recorded with
                               ``with rec.data_loading():``, blocking (sync)
                               by default, and how to declare a prefetching
                               loader instead
``checkpoint_save_storage``    ``{local, persistent}``: the seconds of
                               ``UNPRODUCTIVE_CHECKPOINT_SAVE_TIME`` spent in
                               saves to local paths and to persistent storage
                               (Orbax entries whose directory is a URL such as
                               ``gs://``); they add up to that bucket
``disruptions``                restarts whose segment began in the window
``max_productive_step``        the largest step whose progress was kept
``last_step``                  the last step recorded in the window
``step_time``                  ``{steps_measured, ideal_seconds,
                               median_seconds, p90_seconds,
                               deviation_aggregate_seconds, measured_from,
                               note}`` over the whole run (not windowed);
                               ``measured_from``: ``"sync points"`` (completed
                               work between recorded step ends), ``"step
                               starts"`` (dispatch intervals: no step end in
                               the middle of a segment), ``"mixed"`` or null;
                               ``note``: what that means, in a sentence
``skipped``                    ``{reason: count}`` of unusable inputs
``program_goodput``            null unless the run metadata gives flops per
                               step, a peak FLOP/s (``peak_flops_per_device``
                               or a known ``device_kind``) and ``num_devices``
                               and a step was productive; else ``{mfu,
                               runtime_goodput, ml_productivity_goodput,
                               steps_per_second, productive_steps,
                               productive_seconds, flops_per_step,
                               peak_flops_per_device, num_devices}``, the
                               three goodputs as fractions (0-1), over the
                               whole run (not windowed, no exclusions)
``program_goodput_unusable``   the program-goodput metadata fields present but
                               unusable (``["num_devices=0.5"]``), which
                               leave ``program_goodput`` null; ``[]`` if none
``slice_efficiency``           null unless the run recorded elastic slice
                               counts in force during the window; else
                               ``{stepping, available, seconds}``, time-weighted
                               fractions over the window (``--exclude`` is
                               not applied)
``metrics``                    ``{name: {step, time, time_iso, value}}``: the
                               latest point of each recorded model metric
                               (``step`` null when recorded without one)
``state``                      ``{state, stopped_at, stopped_at_iso, cause,
                               last_sign_of_life, last_sign_of_life_iso,
                               heartbeat_seconds, restarts}``: ``state`` is
                               ``running``, ``stopped`` (no job end, and a
                               disruption was the last event or no sign of
                               life for 3 heartbeat intervals: the lifetime
                               ends at ``stopped_at``, for ``cause``),
                               ``ended`` or ``not started``; ``restarts``:
                               ``[{restart_time, restart_iso,
                               last_sign_of_life, seconds, cause}]``, per
                               attempt that was restarted, the time from its
                               last sign of life to the restart
``lifecycle``, ``incidents``    scheduling goodput, ETTR, MPG and the incidents
                               (keys in :mod:`goodput_core.cli.commands.report_lifecycle`)
``insights``                   ``{hangs, checkpoint, hosts}``: hangs,
                               checkpoint-interval advice and host outliers
                               (keys in :mod:`goodput_core.cli.commands.report_insights`)
=============================  ==============================================

Numbers mean what ``docs/semantics.md`` says; seconds satisfy
``productive_seconds + Σ badput_seconds = total_seconds``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from goodput_core.timeline.buckets import BadputType
from goodput_core.cli import CliError
from goodput_core.cli.commands.common import add_store_argument
from goodput_core.cli.commands.report_insights import insights_report, insights_table
from goodput_core.cli.large_frees import release_large_frees
from goodput_core.queries.blocking_loads import HOW_TO_CHANGE
from goodput_core.cli.commands.report_lifecycle import lifecycle_report, lifecycle_table
from goodput_core.queries.elastic import reportable
from goodput_core.queries.calculator import Calculator
from goodput_core.queries.program_goodput import unusable_metadata
from goodput_core.queries.step_groups import STEP_TIME_NOTES
from goodput_core.text import printable
from goodput_core.cli.timespec import (
    TimeSpecError,
    format_duration,
    format_time,
    parse_interval,
    parse_window,
)
from goodput_core.stores import open_store

__all__ = ["add_arguments", "run", "build_report", "open_run", "resolve_window"]

_ASYNC = BadputType.DATA_LOADING_ASYNC
_CUSTOM = BadputType.CUSTOM_BADPUT_EVENTS
_SAVE = BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME


def add_arguments(parser) -> None:
    parser.add_argument("run", help="run (job) name")
    add_store_argument(parser)
    parser.add_argument(
        "--window", default=None, metavar="SPEC",
        help="the last N (30s, 15m, 1h, 2d) ending at the run's end or now, or START/END "
             "(ISO-8601, naive = local time, or POSIX seconds)")
    parser.add_argument(
        "--exclude", action="append", default=[], metavar="A/B",
        help="remove the interval A/B from every bucket and from total time (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON object for scripts")


def open_run(run_name: str, store_url: Any):
    """``(calculator, store)`` for ``run_name``, refreshed; CliError for an
    unknown run, StoreError for an unusable store. Also used by ``goodput timeline``.
    """
    store = open_store(store_url, create=False)
    # One event first (cheap in every store; runs() reads a whole Cloud Logging
    # log): an unknown run is one error line, not the calculator's warning too.
    if not store.read(run_name, limit=1)[0] and run_name not in store.runs():
        raise CliError(f"no run named {run_name!r} in {store.url} (see: goodput runs)")
    calc = Calculator(run_name, store)
    calc.refresh()
    return calc, store


def resolve_window(calc, spec: Optional[str], now: float) -> Tuple[float, float]:
    """``(start, end)`` of ``--window`` (whole lifetime: ``(-inf, inf)``).

    A relative window ends at the run's end (or ``now`` while it is open),
    so ``--window 1h`` on a finished run means its last hour, not the hour
    before the report was asked for (which might hold nothing).

    Raises:
      CliError: an unreadable spec, or a window that does not overlap the
        run's lifetime (a report of 0 % would read as a measurement).
    """
    if spec is None:
        return -math.inf, math.inf
    try:
        window = parse_window(spec)
    except TimeSpecError as exc:
        raise CliError(f"bad --window: {exc}") from None
    life = calc.lifetime(now)
    a, b = window.resolve(life[1] if life else now)
    if life and not (a < life[1] and b > life[0]):
        raise CliError(
            f"the window {format_time(a)} -> {format_time(b)} does not overlap the lifetime "
            f"of run {calc.run!r} ({format_time(life[0])} -> {format_time(life[1])}): "
            f"nothing to measure")
    return a, b


def _finite(x: Any) -> Any:
    """Replaces NaN and infinities by None, recursively (JSON has no NaN)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _span(a: Optional[float], b: Optional[float]) -> Dict[str, Any]:
    return {"start": a, "end": b, "start_iso": format_time(a), "end_iso": format_time(b)}


def _partition(buckets: Dict[BadputType, float]) -> Dict[str, float]:
    """The buckets that partition total time, by name in enum order (so the
    JSON and the table list them the same way every time): overlapped loading
    is an annotation, reported apart."""
    return {k.name: v for k, v in sorted(buckets.items()) if k is not _ASYNC}


def build_report(calc, result, stats, *, store_url: str, window_spec: Optional[str],
                 exclude: List[Tuple[float, float]]) -> Dict[str, Any]:
    """The report as a JSON-ready dict (keys in the module docstring)."""
    # (the count and percentiles only: the step times themselves are not read,
    # nor joined with their step numbers, at millions of steps tens of MiB)
    measured = stats.count > 0
    life = result.lifetime
    has_life = all(math.isfinite(x) for x in life)
    lifetime = _span(*life) if has_life else _span(None, None)
    lifetime["seconds"] = life[1] - life[0] if has_life else None
    window = _span(*result.window) if has_life else _span(None, None)
    window["spec"] = window_spec
    report = {
        "run": calc.run,
        "store": store_url,
        "query_time": result.query_time,
        "lifetime": lifetime,
        "window": window,
        "exclude": [[a, b] for a, b in exclude],
        "goodput_percent": result.goodput,
        "productive_seconds": result.productive_seconds,
        "total_seconds": result.total_seconds,
        "idle_seconds": result.idle_seconds,
        "excluded_seconds": result.excluded_seconds,
        "scheduling_seconds": result.scheduling_seconds,
        "badput_seconds": _partition(result.badput_seconds),
        "badput_percent": _partition(result.badput_percent),
        "custom_badput_seconds": dict(sorted(result.custom_badput_seconds.items())),
        "custom_badput_percent": dict(sorted(result.custom_badput_percent.items())),
        "data_loading_async_seconds": result.data_loading_async_seconds,
        "data_loading_async_percent": result.badput_percent.get(_ASYNC, 0.0),
        "data_loading_blocking_default": {
            "seconds": calc.blocking_load_seconds(*result.window, now=result.query_time)
            if has_life else 0.0,
            "how_to_change": HOW_TO_CHANGE},
        "checkpoint_save_storage": calc.save_seconds_by_storage(
            *result.window, now=result.query_time, exclude=exclude)
        if has_life else {"local": 0.0, "persistent": 0.0},
        "disruptions": result.disruptions,
        "max_productive_step": result.max_productive_step,
        "last_step": result.last_step,
        "step_time": {
            "steps_measured": int(stats.count),
            "ideal_seconds": stats.ideal_step_time,
            "median_seconds": stats.time_percentile(50) if measured else None,
            "p90_seconds": stats.time_percentile(90) if measured else None,
            "deviation_aggregate_seconds": float(stats.deviation_aggregate) if measured else None,
            "measured_from": getattr(stats, "basis", None) if measured else None,
            "note": STEP_TIME_NOTES.get(getattr(stats, "basis", None)) if measured else None,
        },
        "skipped": dict(sorted(result.skipped.items())),
    }
    report["state"] = state_report(calc.state(result.query_time))
    report.update(_diagnostics(calc, result, has_life))
    report["insights"] = insights_report(calc, result.query_time)
    report.update(lifecycle_report(calc, result))
    return _finite(report)


def state_report(st) -> Dict[str, Any]:
    """The ``state`` key of the report (a :class:`RunState`, rule 15)."""
    return {
        "state": st.state, "stopped_at": st.stopped_at, "stopped_at_iso": format_time(st.stopped_at),
        "cause": st.cause, "last_sign_of_life": st.last_sign_of_life,
        "last_sign_of_life_iso": format_time(st.last_sign_of_life),
        "heartbeat_seconds": st.heartbeat_seconds,
        "restarts": [{"restart_time": r.restart_time, "restart_iso": format_time(r.restart_time),
                      "last_sign_of_life": r.last_sign_of_life, "seconds": r.seconds,
                      "cause": r.cause} for r in st.restarts],
    }


def state_line(state: Optional[Dict[str, Any]]) -> str:
    """``stopped at <time> (<cause>)``, ``running``, ``ended``... for people."""
    if not state:
        return "-"
    if state["state"] == "stopped":
        return f"stopped at {state['stopped_at_iso']} ({state['cause']})"
    return state["state"]


def _diagnostics(calc, result, has_life: bool) -> Dict[str, Any]:
    """The program goodput, slice efficiency and metrics keys of the report."""
    now = result.query_time
    prog = calc.program_goodput(now) if has_life else None
    eff = calc.slice_efficiency(*result.window, now=now) if has_life else None
    metrics: Dict[str, Any] = {}
    for name, series in sorted(calc.metrics_since(-1)[0].items()):
        step, t, value = (series.steps[-1].item(), series.times[-1].item(),
                          series.values[-1].item())  # time order: the last is the latest
        metrics[name] = {"step": step if step >= 0 else None, "time": t,
                         "time_iso": format_time(t), "value": value}
    return {
        "program_goodput_unusable": unusable_metadata(calc.metadata()) if prog is None else [],
        "program_goodput": None if prog is None else {
            "mfu": prog.mfu,
            "runtime_goodput": prog.runtime_goodput,
            "ml_productivity_goodput": prog.ml_productivity_goodput,
            "steps_per_second": prog.steps_per_second,
            "productive_steps": prog.productive_steps,
            "productive_seconds": prog.productive_seconds,
            "flops_per_step": prog.flops_per_step,
            "peak_flops_per_device": prog.peak_flops_per_device,
            "num_devices": prog.num_devices,
        },
        "slice_efficiency": {"stepping": eff.stepping, "available": eff.available,
                             "seconds": eff.seconds}
        if reportable(eff, calc.slice_counts()) else None,
        "metrics": metrics,
    }


# ------------------------------------------------------------------ table
def _secs(v: Optional[float]) -> str:
    if v is None:
        return "-"
    # the friendly form only where it adds something (42.0 s needs no "42.0s")
    return f"{v:.3f} s ({format_duration(v)})" if abs(v) >= 60 else f"{v:.3f} s"


def _row(name: str, seconds: float, percent: Optional[float], note: str = "") -> str:
    pct = "" if percent is None else f"{percent:7.2f} %"
    return f"  {name:<40} {seconds:>12.3f} s {pct:>9}  {format_duration(seconds):>12}{note}"


def format_table(rep: Dict[str, Any]) -> str:
    """The report as a table for people."""
    out: List[str] = []
    life, win = rep["lifetime"], rep["window"]
    out.append(f"Run:            {rep['run']}   (store {rep['store']})")
    if life["start"] is None:
        out.append("Lifetime:       no job start recorded yet: nothing to measure")
    else:
        out.append(f"Lifetime:       {life['start_iso']} -> {life['end_iso']}"
                   f"   ({format_duration(life['seconds'])})")
        if win["spec"] is not None:
            out.append(f"Window:         {win['start_iso']} -> {win['end_iso']}"
                       f"   (--window {win['spec']})")
    state = rep.get("state")
    if state and state["state"] != "not started":
        note = "   (its lifetime ends there)" if state["state"] == "stopped" else ""
        out.append(f"State:          {state_line(state)}{note}")
    for a, b in rep["exclude"]:
        out.append(f"Excluding:      {format_time(a)} -> {format_time(b)}")
    out.append(f"Total time:     {_secs(rep['total_seconds'])}")
    out.append(f"Idle time:      {_secs(rep['idle_seconds'])}   (between attempts; not in total)")
    out.append(f"Excluded time:  {_secs(rep['excluded_seconds'])}")
    if rep.get("scheduling_seconds"):
        out.append(f"Scheduling:     {_secs(rep['scheduling_seconds'])}   (waiting for "
                   f"resources after a requeue; not in total)")
    out.append(f"Goodput:        {rep['goodput_percent']:.2f} %")
    out.append("")
    out.append(f"  {'category':<40} {'seconds':>14} {'% total':>9}  {'duration':>12}")
    out.append(_row("PRODUCTIVE", rep["productive_seconds"], rep["goodput_percent"]))
    pct = rep["badput_percent"]
    for name, secs in rep["badput_seconds"].items():
        out.append(_row(name, secs, pct[name]))
        if name == _CUSTOM.name:
            for kind, v in rep["custom_badput_seconds"].items():
                out.append(_row(f"  {kind}", v, rep["custom_badput_percent"][kind]))
        storage = rep.get("checkpoint_save_storage") or {}
        if name == _SAVE.name and storage.get("persistent"):  # local vs persistent saves
            total = rep["total_seconds"]
            for kind in ("local", "persistent"):
                v = storage[kind]
                out.append(_row(f"  {kind} saves", v, 100 * v / total if total > 0 else 0.0))
    out.append(_row("TOTAL", rep["total_seconds"], 100.0 if rep["total_seconds"] > 0 else 0.0))
    out.append(_row(_ASYNC.name, rep["data_loading_async_seconds"],
                    rep["data_loading_async_percent"], "   (overlapped by steps; not in total)"))
    blocking = rep["data_loading_blocking_default"]
    if blocking["seconds"] > 0:
        out.append(f"  of DATA_LOADING_SYNC, {_secs(blocking['seconds'])} counted blocking by "
                   f"default: {blocking['how_to_change']}")
    out.append("")
    st = rep["step_time"]
    out.append("Steps")
    out.append(f"  disruptions (restarts)   {rep['disruptions']}")
    out.append(f"  max productive step      {rep['max_productive_step']}")
    out.append(f"  last step                {rep['last_step']}")
    for r in (state or {}).get("restarts", []):
        gap = "-" if r["seconds"] is None else _secs(r["seconds"])
        why = f", {r['cause']}" if r["cause"] else ""
        out.append(f"  restart at {r['restart_iso']}: {gap} after the last sign of life{why}")
    out.append("Step time (whole run)")
    out.append(f"  steps measured           {st['steps_measured']}")
    out.append(f"  ideal step time          {_secs(st['ideal_seconds'])}")
    out.append(f"  median step time         {_secs(st['median_seconds'])}")
    out.append(f"  p90 step time            {_secs(st['p90_seconds'])}")
    out.append(f"  deviation (aggregate)    {_secs(st['deviation_aggregate_seconds'])}")
    if st.get("note"):
        out.append(f"  measured from            {st['note']}")
    out.extend(_diagnostics_table(rep))
    out.extend(insights_table(rep.get("insights") or {}))
    out.extend(lifecycle_table(rep))
    skipped = rep["skipped"]
    out.append("Skipped inputs" + ("" if skipped else ": none"))
    for reason, n in skipped.items():
        out.append(f"  {reason:<24} {n}")
    # Run names, custom event types and metric names are user data.
    return "\n".join(printable(line) for line in out)


def _pct(fraction: Optional[float]) -> str:
    return "-" if fraction is None else f"{100 * fraction:.2f} %"


def _num(value: Optional[float], spec: str = ".4g") -> str:
    """A number of the report (None where it was NaN or infinite) as text."""
    return "-" if value is None else format(value, spec)


def _diagnostics_table(rep: Dict[str, Any]) -> List[str]:
    """Table lines for program goodput, slice efficiency and metrics (when present)."""
    out: List[str] = []
    prog = rep.get("program_goodput")
    unusable = rep.get("program_goodput_unusable")
    if prog is None and unusable:
        out.append(f"Program goodput: not computed, unusable metadata: {', '.join(unusable)}")
    if prog is not None:
        out.append("Program goodput (whole run)")
        out.append(f"  runtime goodput          {_pct(prog['runtime_goodput'])}")
        out.append(f"  program goodput (MFU)    {_pct(prog['mfu'])}")
        out.append(f"  ML productivity goodput  {_pct(prog['ml_productivity_goodput'])}"
                   "   (runtime x program)")
        out.append(f"  productive steps         {prog['productive_steps']} in "
                   f"{_secs(prog['productive_seconds'])} ({_num(prog['steps_per_second'])} "
                   "steps/s)")
        out.append(f"  FLOPs per step           {_num(prog['flops_per_step'])} on "
                   f"{prog['num_devices']} devices of {_num(prog['peak_flops_per_device'])} "
                   "FLOP/s peak")
    eff = rep.get("slice_efficiency")
    if eff is not None:
        out.append("Slice efficiency (time-weighted, over the window)")
        out.append(f"  stepping                 {_pct(eff['stepping'])}")
        out.append(f"  available                {_pct(eff['available'])}")
    metrics = rep.get("metrics") or {}
    if metrics:
        out.append("Metrics (latest)")
        for name, m in metrics.items():
            where = f"step {m['step']}" if m["step"] is not None else m["time_iso"]
            out.append(f"  {name:<24} {_num(m['value'], '.6g')}   ({where})")
    return out


def run(args) -> int:
    release_large_frees()  # a long run's temporaries: tens of MiB each
    now = time.time()
    calc, store = open_run(args.run, args.store)
    a, b = resolve_window(calc, args.window, now)
    try:
        exclude = [parse_interval(x) for x in args.exclude]
    except TimeSpecError as exc:
        raise CliError(f"bad --exclude: {exc}") from None
    result = calc.window(a, b, now=now, exclude=exclude)
    rep = build_report(calc, result, calc.step_stats(incremental=False), store_url=store.url,
                       window_spec=args.window, exclude=exclude)
    if args.json:
        sys.stdout.write(json.dumps(rep, allow_nan=False) + "\n")
    else:
        sys.stdout.write(format_table(rep) + "\n")
    return 0
