"""``goodput demo``: the README's main job.

Trains a small Flax model on CPU with Orbax checkpoints and every adapter on
(:mod:`goodput_integrations.demo`), in a child process that kills itself with
SIGKILL mid-run; a second child restarts from the last checkpoint and trains
to the end. Both record to the embedded store. Then it prints the goodput
report, writes TensorBoard event files and the timeline picture, and says
where everything is::

    goodput demo [--outdir goodput_demo_output] [--store URL] [--run NAME]
                 [--steps 240] [--save-every 20] [--crash-at 155]
    goodput demo --synthetic      # no jax needed: a backfilled synthetic job
    goodput demo --torch          # PyTorch under torchrun: a rank killed, a restart

``--torch`` trains the PyTorch example loop under real torchrun (two ranks
over gloo, ``torch.compile``, DCP checkpoints): rank 1 kills itself with
SIGKILL mid-run, torchrun restarts both ranks from the last checkpoint
(:mod:`goodput_core.cli.demo_torchrun`). It needs torch.

Without jax, flax, optax or orbax-checkpoint it says so in one line and plays
the synthetic job (:mod:`goodput_core.cli.synthetic`) instead. This module never
imports jax: the training runs in child processes.

``--run`` is a name, never a path: it may not contain a path separator, be
``.`` or ``..``, or hold control characters. The demo deletes only the
checkpoint directory it created itself (``DIR/checkpoints/RUN``, which must
not exist beforehand), never anything a name could point to.
"""

from __future__ import annotations

import collections
import os
import shlex
import shutil
import sys
import time
from typing import Any, Dict, Optional, TextIO

from goodput_core.cli import CliError, CliIOError
# the drivers by module: tests replace their functions (a program that cannot start)
from goodput_core.cli import demo_attempts, demo_torchrun
from goodput_core.cli import plot_timeline as pt
from goodput_core.cli.commands.report import build_report, format_table, open_run
from goodput_core.cli.commands.timeline import render_html
from goodput_core.cli.serve.security import run_segment
from goodput_core.cli.synthetic import SyntheticJob, record_synthetic_job
from goodput_core.events import Kind
from goodput_core.monitor import Monitor
from goodput_core.record.recorder import Recorder
from goodput_core.redact import redact
from goodput_core.stores import open_store, schemes

__all__ = ["add_arguments", "run"]

DEFAULT_OUTDIR = "goodput_demo_output"
_BAR_WIDTH = 30


def add_arguments(parser) -> None:
    parser.add_argument("--outdir", default=DEFAULT_OUTDIR, metavar="DIR",
                        help=f"where the store, checkpoints, logs, TensorBoard files and the "
                             f"timeline go (default: ./{DEFAULT_OUTDIR})")
    parser.add_argument("--store", default=None, metavar="URL",
                        help="store URL or sqlite path (default: DIR/goodput.sqlite)")
    parser.add_argument("--run", default=None, help="run name (default: demo-<time>)")
    parser.add_argument("--synthetic", action="store_true",
                        help="play a synthetic, backfilled job instead (instant; no jax needed)")
    parser.add_argument("--steps", type=int, default=None,
                        help="training steps (default 240; with --torch 120)")
    parser.add_argument("--save-every", type=int, default=20,
                        help="checkpoint every N steps (default 20)")
    parser.add_argument("--crash-at", type=int, default=None,
                        help="the first attempt kills itself after this step (default 155; "
                             "with --torch 75)")
    parser.add_argument("--torch", action="store_true",
                        help="train with PyTorch under torchrun instead (2 ranks; rank 1 is "
                             "killed after --crash-at, default 75 of 120 steps)")
    parser.add_argument("--compile", default="aot_eager", metavar="BACKEND",
                        help="with --torch: the torch.compile backend (default aot_eager: "
                             "compiles in seconds on a CPU; inductor, or none)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep the checkpoints (default: removed at the end)")


def _check_arguments(args) -> None:
    if args.steps is None:
        args.steps = 120 if args.torch else 240
    if args.crash_at is None:
        args.crash_at = 75 if args.torch else 155
    if args.torch and args.synthetic:
        raise CliError("--torch and --synthetic exclude each other")
    if args.run is not None:
        check_run_name(args.run)
    if not 0 < args.steps or not 0 < args.save_every:
        raise CliError("--steps and --save-every must be positive")
    if not 0 <= args.crash_at < args.steps:
        raise CliError(f"--crash-at must lie in [0, {args.steps - 1}] (the steps trained)")


def check_run_name(name: str) -> None:
    """Raises CliError unless ``name`` can name a directory under the output dir."""
    if (not name or name in (".", "..") or "/" in name or "\\" in name
            or (os.altsep and os.altsep in name) or not name.isprintable()):
        raise CliError(f"--run must be a plain name (no path separators, '.', '..' or "
                       f"control characters), got {name!r}")


def run(args) -> int:
    _check_arguments(args)
    outdir = os.path.abspath(args.outdir)
    try:
        os.makedirs(outdir, exist_ok=True)
    except OSError as exc:
        raise CliIOError(f"cannot create --outdir {outdir}: {exc.strerror or exc}") from None
    store = args.store or os.path.join(outdir, "goodput.sqlite")
    run_name = _run_name(store, args.run)
    synthetic = args.synthetic
    if args.torch:
        if demo_torchrun.torch_missing():
            raise CliError("goodput demo --torch needs torch: pip install torch")
    elif not synthetic:
        missing = demo_attempts.frameworks_missing()
        if missing:
            print(f"goodput demo: {', '.join(missing)} not installed (pip install "
                  f"'goodput-core[jax]'): playing the synthetic job instead", flush=True)
            synthetic = True
    if synthetic:
        _play_synthetic(run_name, store)
    else:
        if not schemes.shared(str(store)):
            raise CliError("the demo trains in child processes: a memory:// store would "
                           "not outlive them; use a sqlite path")
        (_play_torch if args.torch else _play_real)(args, run_name, store, outdir)
    _finish(run_name, store, outdir, synthetic)
    return 0


def _run_name(store: str, given: Optional[str]) -> str:
    """``given``, or a fresh name; the store is opened here first, so one it
    refuses (not a goodput store, newer) is one error before anything plays."""
    opened = open_store(store)
    try:
        taken = set(opened.runs())
    finally:
        opened.close()
    if given:
        return given
    base = time.strftime("demo-%Y%m%d-%H%M%S")
    name, n = base, 1
    while name in taken:  # two demos within a second
        n += 1
        name = f"{base}-{n}"
    return name


# ------------------------------------------------------------------ jobs
def _play_synthetic(run_name: str, store: str) -> None:
    rec = Recorder(run_name, store)
    job = SyntheticJob()
    played = record_synthetic_job(rec, time.time() - 120.0, job)
    if not rec.flush(30):
        raise CliError(f"could not write to the store {redact(store)}")
    events, _ = rec._store.read(run_name)
    rec.close()
    counts = collections.Counter(Kind(e.kind).name.lower() for e in events)
    print(f"Recorded the synthetic run {run_name!r}: {len(events)} events "
          f"({', '.join(f'{n} {k}' for k, n in sorted(counts.items()))}).")
    print(f"Played: a crash at step {job.crash_at_step}, restart from step "
          f"{played['restart_step']}, {played['end'] - played['start']:.1f} s of job time.\n")


def _fresh_workdir(outdir: str, run_name: str) -> str:
    """``DIR/checkpoints/RUN``, created now: a fresh job has nothing to resume
    from, and it is the only directory the demo may delete."""
    workdir = os.path.join(outdir, "checkpoints", run_name)
    try:
        os.makedirs(workdir, exist_ok=False)
    except FileExistsError:
        raise CliError(f"{workdir} already exists (checkpoints of an earlier demo?): "
                       "remove it or choose another --run") from None
    except OSError as exc:
        raise CliIOError(f"cannot create {workdir}: {exc.strerror or exc}") from None
    return workdir


def _remove_workdir(outdir: str, workdir: str, parent_existed: bool = True) -> None:
    shutil.rmtree(workdir, ignore_errors=True)  # created by _fresh_workdir, by this demo
    if not parent_existed:
        try:  # ours too, unless another demo put checkpoints there
            os.rmdir(os.path.join(outdir, "checkpoints"))
        except OSError:
            pass


def _play_real(args, run_name: str, store: str, outdir: str) -> None:
    def play(workdir: str, on_message) -> Dict[str, Any]:
        cfg = demo_attempts.DemoConfig(
            store=store, run=run_name, workdir=workdir, steps=args.steps,
            save_every=args.save_every, crash_at=args.crash_at,
            log_dir=os.path.join(outdir, "logs", run_name))
        return demo_attempts.run_crash_and_restart(cfg, on_message=on_message)

    print(f"Training a small Flax MLP on CPU ({args.steps} steps, an Orbax checkpoint every "
          f"{args.save_every}); the first attempt will crash (SIGKILL) after step "
          f"{args.crash_at}, the second restarts from the last checkpoint.", flush=True)
    _train(args, run_name, outdir, play)


def _play_torch(args, run_name: str, store: str, outdir: str) -> None:
    def play(workdir: str, on_message) -> Dict[str, Any]:
        cfg = demo_torchrun.TorchDemoConfig(
            store=store, run=run_name, workdir=workdir, steps=args.steps,
            save_every=args.save_every, crash_at=args.crash_at, compile=args.compile,
            log_path=os.path.join(outdir, "logs", run_name, "torchrun.log"))
        summary = demo_torchrun.run_torchrun_crash_and_restart(cfg, on_message=on_message)
        summary["attempts"] = [1, 2]
        return summary

    print(f"Training a small PyTorch MLP under torchrun on CPU (2 ranks over gloo, "
          f"torch.compile backend {args.compile}, {args.steps} steps, a DCP checkpoint every "
          f"{args.save_every}); rank 1 will kill itself (SIGKILL) after step {args.crash_at}, "
          f"torchrun restarts both ranks from the last checkpoint.", flush=True)
    _train(args, run_name, outdir, play)


def _train(args, run_name: str, outdir: str, play) -> None:
    """Runs ``play(workdir, on_message)`` in a fresh checkpoint directory with a
    progress bar; removes the directory after unless ``--keep-checkpoints``."""
    parent_existed = os.path.isdir(os.path.join(outdir, "checkpoints"))
    workdir = _fresh_workdir(outdir, run_name)
    bar = _Progress(args.steps, sys.stdout)
    started = time.monotonic()
    try:
        summary = play(workdir, bar)
    except demo_attempts.DemoError as exc:
        bar.close()
        raise CliError(str(exc)) from None
    finally:
        if not args.keep_checkpoints:
            _remove_workdir(outdir, workdir, parent_existed)
    bar.close()
    loss = summary.get("final_loss")
    print(f"Trained in {time.monotonic() - started:.1f} s over {len(summary['attempts'])} "
          f"attempts" + (f"; final loss {loss:.4f}" if isinstance(loss, float) else "") + ".\n",
          flush=True)


class _Progress:
    """Turns the children's messages into a progress bar and a few lines.

    On a terminal the bar is redrawn in place (at most 20 times a second);
    otherwise it is printed at every tenth of the steps, so logs stay short.
    """

    def __init__(self, steps: int, stream: TextIO):
        self.steps = max(1, steps)
        self.out = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.step = 0
        self.loss: Optional[float] = None
        self.attempt = 1
        self._drawn = 0.0
        self._tenth = -1
        self._printed = -1  # the step of the last bar printed (not on a terminal)
        self._bar_shown = False

    def __call__(self, number: int, msg: Dict[str, Any]) -> None:
        event = msg.get("event")
        self.attempt = number
        if event == "attempt":
            self._line(f"attempt {number}: started (pid {msg.get('pid')})")
        elif event == "restored":
            self.step = int(msg["step"])
            self._line(f"attempt {number}: restored the checkpoint of step {self.step}; "
                       f"steps after it are redone")
        elif event == "step":
            self.step = int(msg["step"]) + 1
            if msg.get("loss") is not None:
                self.loss = float(msg["loss"])
            self._draw()
        elif event == "crash":
            self._draw(force=True)
            self._line(f"attempt {number}: CRASH after step {msg['step']}: the process "
                       f"killed itself with SIGKILL (no job end recorded)")
        elif event == "done":
            self._draw(force=True)
            self._line(f"attempt {number}: finished all {msg['step']} steps")

    def _bar(self) -> str:
        filled = int(_BAR_WIDTH * self.step / self.steps)
        loss = "" if self.loss is None else f"  loss {self.loss:.4f}"
        return (f"  [{'#' * filled}{'-' * (_BAR_WIDTH - filled)}] {self.step:>5}/{self.steps}"
                f" steps  attempt {self.attempt}{loss}")

    def _draw(self, force: bool = False) -> None:
        if self.tty:
            now = time.monotonic()
            if force or now - self._drawn >= 0.05:
                self._drawn = now
                self.out.write("\r" + self._bar() + "\x1b[K")
                self.out.flush()
                self._bar_shown = True
            return
        tenth = 10 * self.step // self.steps
        if (force and self.step != self._printed) or tenth != self._tenth:
            self._tenth, self._printed = tenth, self.step
            self.out.write(self._bar() + "\n")
            self.out.flush()

    def _line(self, text: str) -> None:
        if self.tty and self._bar_shown:
            self.out.write("\r\x1b[K")
            self._bar_shown = False
        self.out.write(text + "\n")
        self.out.flush()
        self._tenth = self._printed = -1  # redraw the bar after a message

    def close(self) -> None:
        if self.tty and self._bar_shown:
            self.out.write("\n")
            self._bar_shown = False
        self.out.flush()


# ----------------------------------------------------------------- output
def _finish(run_name: str, store: str, outdir: str, synthetic: bool) -> None:
    """Prints the report, writes TensorBoard files and the timeline, says where."""
    now = time.time()
    calc, opened = open_run(run_name, store)
    result = calc.cumulative(now=now)
    rep = build_report(calc, result, calc.step_stats(), store_url=opened.url,
                       window_spec=None, exclude=[])
    print(format_table(rep))
    print()
    where = [("store", f"{opened.url}   (run {run_name})")]
    where.append(_write_tensorboard(calc, run_name, outdir))
    where.append(_write_timeline(calc, now, outdir))
    if not synthetic:
        where.append(("child logs", os.path.join(outdir, "logs", run_name)))
    print("Where everything is:")
    for key, value in where:
        print(f"  {key:<12} {value}")
    # The demo's store is not the default one: every command needs --store.
    url = shlex.quote(opened.url)
    print("Look again (copy and paste; the demo's store is not the default store):")
    cmd = _goodput_command()
    print(f"  {cmd} report {shlex.quote(run_name)} --store {url}")
    print(f"  {cmd} runs --store {url}")
    print(f"  {cmd} timeline {shlex.quote(run_name)} --store {url} -o timeline.html")
    print("Watch it in the browser (a live dashboard; Ctrl-C stops it):")
    print(f"  {cmd} serve --store {url}")
    print(f"  then open {_dashboard_url(run_name)}")
    sys.stdout.flush()


def _dashboard_url(run_name: str) -> str:
    """The run page of ``goodput serve`` on its default address."""
    return f"http://127.0.0.1:8765/run/{run_segment(run_name)}"


def _goodput_command() -> str:
    """``goodput`` when the shell finds this installation's command, else its
    path (``make demo`` installs into ./.venv, which is not on PATH)."""
    import shutil

    here = os.path.join(os.path.dirname(sys.executable), "goodput")
    found = shutil.which("goodput")
    if found and os.path.realpath(found) == os.path.realpath(here):
        return "goodput"
    if os.path.exists(here):
        return shlex.quote(here)
    return f"{shlex.quote(sys.executable)} -m goodput_core.cli"


def _write_tensorboard(calc, run_name: str, outdir: str):
    base = os.path.join(outdir, "tensorboard")
    try:
        # lazy: tensorboardX is optional (missing: the demo goes on without)
        from goodput_core.exporters.tensorboard import TensorBoardExporter

        exporter = TensorBoardExporter(os.path.join(base, run_name))
    except ImportError as exc:
        return ("tensorboard", f"not written: pip install 'goodput-core[tensorboard]' ({exc})")
    # One monitor cycle with the TensorBoard exporter, through the warm calculator.
    monitor = Monitor(run_name, exporters=[exporter], calculator=calc)
    snapshot = monitor.run_once(final=True)
    monitor.stop(skip_final_flush=True)
    if snapshot is None:
        return ("tensorboard", "not written: the monitor cycle failed (see the log)")
    return ("tensorboard", f"{exporter.log_dir}   (tensorboard --logdir {base})")


def _write_timeline(calc, now: float, outdir: str):
    data = pt.collect(calc, now=now)
    png = os.path.join(outdir, "timeline.png")
    try:
        pt.render_image(data, png)
        return ("timeline", png)
    except pt.PlotUnavailable:
        page = os.path.join(outdir, "timeline.html")
        render_html(data, page)
        return ("timeline", f"{page}   (no matplotlib for a PNG: pip install 'goodput-core[plot]')")
