"""Run unmodified MaxText with goodput on our engine.

Usage::

    python -m goodput_integrations.maxtext.launch [OPTIONS] [--] COMMAND...

    COMMAND is MaxText's own train command, with or without the leading
    ``python3``:  -m maxtext.trainers.pre_train.train src/maxtext/configs/base.yml key=value ...
              or  path/to/train.py CONFIG.yml key=value ...

    OPTIONS (ours; MaxText's config rejects keys it does not know). Each one
    can also come from its environment variable (GOODPUT_STORE, ...); the
    option wins:
      --goodput-store URL              where events go ($GOODPUT_STORE;
                                       default: the embedded sqlite file)
      --goodput-prometheus-port N      also serve Prometheus on 127.0.0.1:N
                                       ($GOODPUT_PROMETHEUS_PORT)
      --goodput-rolling-windows S,...  also upload rolling windows, seconds
                                       ($GOODPUT_ROLLING_WINDOWS)
      --goodput-ideal-step-time S      the monitor's ideal step time, seconds
                                       ($GOODPUT_IDEAL_STEP_TIME)
      --goodput-checkpoint-stats B     record Orbax save/restore statistics
                                       (true; $GOODPUT_CHECKPOINT_STATS)
      --goodput-no-checkpoint-stats    the same as --goodput-checkpoint-stats=false
      --goodput-run-group G            the run's group (``goodput runs --group G``;
                                       $GOODPUT_RUN_GROUP)
      --goodput-system-metrics B       sample host/GPU/TPU utilisation every 10 s
                                       into the run (false; $GOODPUT_SYSTEM_METRICS)

Goodput is still switched on by MaxText's flags: ``enable_goodput_recording=true``
and ``monitor_goodput=true`` (and the others MaxText reads). The launcher
enables :func:`~goodput_integrations.maxtext.alias.enable_reference_alias` in
this process, then runs the command as ``python`` would (``runpy``), so
``from ml_goodput_measurement import goodput, monitoring`` inside MaxText
gets our classes. It also adds what MaxText does not record
(:mod:`~goodput_integrations.maxtext.runtime`): Orbax checkpoint statistics
(patched when MaxText imports Orbax, never imported by us), compilations
as program startup (MaxText compiles its train step outside any goodput
block), and a
the whole process (:mod:`~goodput_integrations.maxtext.whole_process`:
imports and config before MaxText's job start as training preparation, the
shutdown after its job end as the custom badput ``SHUTDOWN``), and a
disruption with its cause when the command raises (``exception:<Type>``,
``exit:<status>``) or the process gets SIGTERM once MaxText has built its
recorder (``sigterm``). MaxText's own ``maybe_monitor_goodput`` is guarded
(:mod:`~goodput_integrations.maxtext.monitor_guard`): a monitor that fails
to start is one warning, never the job's end, and ours runs in its place.
MaxText's ``managed_mldiagnostics`` flags reach our diagnostics compat
(``google_cloud_mldiagnostics`` is aliased too:
:mod:`~goodput_integrations.maxtext.mldiagnostics`), and its workload
heartbeat and performance metrics go to our monitor instead of Google Cloud
Monitoring (:mod:`~goodput_integrations.maxtext.workload_monitor`: no job is
stopped for want of Google credentials). Nothing heavy is imported before
the command runs.
"""

from __future__ import annotations

import logging
import os
import runpy
import sys
from typing import Any, Callable, List, Optional, Sequence, Tuple

from goodput_integrations.errors import AdapterUnavailable
from goodput_integrations.maxtext import (alias, config, monitor_guard, runtime, whole_process,
                                          workload_monitor)

__all__ = ["main", "parse_args"]

logger = logging.getLogger("goodput")

_USAGE = __doc__.split("Goodput is still", 1)[0].strip()
_PYTHONS = ("python", "python3")


class UsageError(ValueError):
    """Bad launcher arguments (printed with the usage, exit code 2)."""


_FLAGS = {config.flag_name(key): key for key in config.OUR_SETTINGS}
_NO_CHECKPOINT_STATS = "--goodput-no-checkpoint-stats"


def parse_args(argv: Sequence[str]) -> Tuple[dict, List[str]]:
    """Splits our options from the command; parses and validates ours
    (each from its option, else its environment variable).

    Returns:
      ``(alias settings as keyword arguments, command)``.

    Raises:
      UsageError: an unknown option, a bad value, or no command.
    """
    argv = list(argv)
    given: dict = {}
    i = 0
    while i < len(argv) and argv[i].startswith("--goodput-"):
        flag, eq, value = argv[i].partition("=")
        if flag == _NO_CHECKPOINT_STATS and not eq:
            given["goodput_checkpoint_stats"] = "false"
            i += 1
            continue
        if flag not in _FLAGS:
            raise UsageError(f"unknown option {flag}")
        if not eq:
            if i + 1 >= len(argv):
                raise UsageError(f"{flag} needs a value")
            i += 1
            value = argv[i]
        given[_FLAGS[flag]] = value
        i += 1
    if i < len(argv) and argv[i] == "--":
        i += 1
    command = argv[i:]
    if command and os.path.basename(command[0]) in _PYTHONS:
        command = command[1:]  # a pasted "python3 -m maxtext.trainers.pre_train.train ..."
    if not command or command == ["-m"]:
        raise UsageError("no command to run")
    try:
        options = config.read_ours(given.get, config.flag_name)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return options, command


def _hint(command: Sequence[str]) -> None:
    flags = {a.partition("=")[0].lower(): a.partition("=")[2].lower() for a in command if "=" in a}
    if flags.get("enable_goodput_recording") not in ("true", "1"):
        # it may be set in the YAML file: a hint, not a warning
        logger.info("goodput: MaxText records goodput only with enable_goodput_recording=true "
                    "(and monitors it with monitor_goodput=true)")


def _enable(options: dict, clock: Optional[Callable[[], float]],
            process_start: Optional[float]) -> None:
    options = dict(options, clock=clock, compile_spans=True, disruptions=True,
                   process_start=process_start, mldiagnostics=True)
    try:
        alias.enable_reference_alias(**options)
    except AdapterUnavailable as exc:
        # checkpoint statistics were asked for by default: go on without them
        logger.info("goodput: no Orbax checkpoint statistics (%s)", exc)
        alias.enable_reference_alias(**dict(options, checkpoint_stats=False))


def run(command: Sequence[str]) -> Any:
    """Runs ``command`` (``-m MODULE args...`` or ``SCRIPT args...``) as ``__main__``."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if command[0] == "-m":
            sys.argv = [command[1], *command[2:]]
            return runpy.run_module(command[1], run_name="__main__", alter_sys=True)
        script = command[0]
        sys.argv = [script, *command[1:]]
        # as `python script.py` does: the script's folder comes first on the path
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        return runpy.run_path(script, run_name="__main__")
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path


def main(argv: Optional[Sequence[str]] = None, *,
         clock: Optional[Callable[[], float]] = None,
         process_start: Optional[float] = None) -> int:
    """The launcher's entry point.

    Args:
      argv: the arguments after the module name (default ``sys.argv[1:]``).
      clock: test hook: the time source of every aliased class.
      process_start: test hook: when the process started, on ``clock``
        (default: from the OS, unless ``clock`` is given).

    Returns:
      0 when the command returned normally (an exception or ``SystemExit``
      it raises propagates, as under ``python``, after its disruption is
      recorded); 2 on a usage error.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(_USAGE)
        return 0
    try:
        options, command = parse_args(argv)
    except UsageError as exc:
        print(f"goodput launch: {exc}\n\n{_USAGE}", file=sys.stderr)
        return 2
    _hint(command)
    if process_start is None and clock is None:
        process_start = whole_process.process_start_time()
    _enable(options, clock, process_start)
    monitor_guard.arm()
    workload_monitor.arm(clock)
    try:
        run(command)
    except BaseException as exc:  # propagating out of MaxText: a crash (or exit 0)
        runtime.record_crash(exc)
        raise
    finally:
        monitor_guard.disarm()
        alias.disable_reference_alias()  # also removes the hooks and the Orbax patch
    return 0


if __name__ == "__main__":
    sys.exit(main())
