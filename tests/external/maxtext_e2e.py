"""Opt-in external test: real MaxText on CPU under our launcher, then as a fork.

Run it with ``make test-maxtext`` (not part of ``make test``: it downloads
MaxText and its ~250 dependencies). It

1. creates its own Python 3.12 environment (``build/maxtext-venv``; MaxText
   needs Python >= 3.12), installs ``maxtext[tpu]`` and this project;
2. **launcher path**: runs MaxText's real train module
   (``maxtext.trainers.pre_train.train``) with a tiny model on synthetic
   data, checkpointing on, four times under
   ``python -m goodput_integrations.maxtext.launch``: 20 steps; a long run
   stopped by SIGTERM after step 23; a resume to 30 steps (steps 21-23 are
   redone); the same command again, which MaxText refuses with a
   ``RuntimeError`` (the checkpoint already has 30 steps: a real crash);
3. **fork path**: copies the installed ``maxtext`` package, replaces the
   body of ``maxtext/common/goodput.py`` with the one line of the README,
   uninstalls ``ml-goodput-measurement`` and runs the same four attempts
   with plain ``python -m maxtext.trainers.pre_train.train``;
4. checks that the first attempt's report total is within 1 s of its process's wall
   time (the whole process is accounted for), and that
   ``report_performance_metric_for_gcp_monitoring=true`` does not end a launched job
   (MaxText's compile cache goes to ``<work>/jax_cache``, not ``~/jax_cache``);
5. checks each run's report (job time, TPU init, training preparation,
   program startup, checkpoint save and restore time, productive time,
   recovery and wasted progress all > 0; both disruption causes recorded) and the
   TensorBoard goodput scalars MaxText's monitor wrote.

Usage::

    python3 tests/external/maxtext_e2e.py [--python PYTHON3.12] [--venv DIR]
        [--work DIR] [--maxtext SPEC] [--skip-install]

Nothing here sleeps on the clock: the SIGTERM is sent when MaxText prints
that it completed step 23.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = "maxtext[tpu]==0.2.5"
TRAIN_MODULE = "maxtext.trainers.pre_train.train"
CONFIG = "src/maxtext/configs/base.yml"
FORK_LINE = "from goodput_integrations.maxtext.fork import *  # noqa: F401,F403\n"
#: A model small enough for a CPU, synthetic data, checkpoints every 10 steps.
TINY = [
    "hardware=cpu", "skip_jax_distributed_system=true", "dataset_type=synthetic",
    "per_device_batch_size=1", "max_target_length=32", "base_emb_dim=16", "base_mlp_dim=32",
    "base_num_query_heads=2", "base_num_kv_heads=2", "head_dim=8",
    "base_num_decoder_layers=2", "vocab_size=128", "enable_checkpointing=true",
    "checkpoint_period=10", "log_period=5",
    "enable_goodput_recording=true", "monitor_goodput=true",
    # no Google Cloud here
    "enable_gcp_goodput_metrics=false", "enable_gcp_step_deviation_metrics=false",
]
SIGTERM_STEP = 23
STEP_LINE = re.compile(r"completed step: (\d+)")
ATTEMPT_TIMEOUT_S = 900


class Failure(AssertionError):
    pass


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise Failure(msg)


def find_python312(given: Optional[str]) -> str:
    candidates = [given] if given else []
    candidates += [shutil.which("python3.12") or "",
                   os.path.expanduser("~/.pyenv/versions/3.12.1/bin/python3")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3")))
    for c in candidates:
        if c and os.path.exists(c) and subprocess.run(
                [c, "-c", "import sys; sys.exit(sys.version_info[:2] < (3, 12))"],
                capture_output=True).returncode == 0:
            return c
    raise SystemExit("maxtext_e2e: no Python 3.12 found; pass --python /path/to/python3.12")


def sh(cmd: Sequence[str], **kwargs) -> None:
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run(list(map(str, cmd)), check=True, **kwargs)


# --------------------------------------------------------------- bootstrap
def bootstrap(args: argparse.Namespace) -> int:
    venv = Path(args.venv)
    py = venv / "bin" / "python"
    t0 = time.monotonic()
    if not args.skip_install:
        if not py.exists():
            sh([find_python312(args.python), "-m", "venv", venv])
            sh([py, "-m", "pip", "install", "-q", "--upgrade", "pip"])
        sh([py, "-m", "pip", "install", "-q", args.maxtext])
        sh([py, "-m", "pip", "install", "-q", "-e", f"{ROOT}[jax,tensorboard]"])
    install_s = time.monotonic() - t0
    cmd = [str(py), __file__, "--inside", "--work", args.work, "--install-seconds",
           f"{install_s:.0f}"]
    print("+", " ".join(cmd), flush=True)
    return subprocess.call(cmd)


# ------------------------------------------------------------- inside venv
class Attempt:
    """One MaxText process; its output goes to a log file."""

    def __init__(self, argv: List[str], env: Dict[str, str], log: Path):
        self.argv, self.env, self.log = argv, env, log

    def run(self, *, sigterm_after_step: Optional[int] = None) -> int:
        """Runs the process; ``self.wall`` is its wall time (start to reaped)."""
        print(f"  $ {' '.join(self.argv[:6])} ... > {self.log}", flush=True)
        started = time.time()
        with open(self.log, "w") as out:
            proc = subprocess.Popen(self.argv, env=self.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, cwd=self.log.parent)
            lines: "queue.Queue[Optional[str]]" = queue.Queue()

            def pump() -> None:
                for line in proc.stdout:
                    out.write(line)
                    lines.put(line)
                lines.put(None)

            reader = threading.Thread(target=pump, daemon=True)
            reader.start()
            deadline = time.monotonic() + ATTEMPT_TIMEOUT_S
            signalled = False
            while True:
                try:
                    line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    proc.kill()
                    raise Failure(f"{self.log}: no end after {ATTEMPT_TIMEOUT_S}s")
                if line is None:
                    break
                m = STEP_LINE.search(line)
                if (sigterm_after_step is not None and not signalled and m
                        and int(m.group(1)) >= sigterm_after_step):
                    proc.send_signal(signal.SIGTERM)
                    signalled = True
            reader.join()
            code = proc.wait()
        self.wall = time.time() - started
        if sigterm_after_step is not None:
            check(signalled, f"{self.log}: never reached step {sigterm_after_step}")
        return code


def report(venv_bin: Path, run: str, store: str) -> dict:
    out = subprocess.run([str(venv_bin / "goodput"), "report", run, "--json", "--store", store],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def goodput_cli(env: Dict[str, str], *args: str) -> str:
    """The output of ``goodput ARGS`` of this environment."""
    return subprocess.run([str(Path(sys.executable).parent / "goodput"), *args], env=env,
                          check=True, capture_output=True, text=True).stdout


def events(venv_bin: Path, run: str, store: str) -> List[dict]:
    out = subprocess.run([str(venv_bin / "goodput"), "events", run, "--store", store],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def scenario(name: str, base_cmd: List[str], env: Dict[str, str], work: Path,
             store: str) -> dict:
    """The four attempts of one path; returns the checked report."""
    run = f"e2e-{name}"
    out_dir = work / "out"
    venv_bin = Path(sys.executable).parent
    # MaxText's compile cache defaults to ~/jax_cache: keep it in the work dir (build/)
    common = [*base_cmd, CONFIG, *TINY, f"run_name={run}", f"base_output_directory={out_dir}",
              f"jax_cache_dir={work / 'jax_cache'}"]
    t0 = time.monotonic()
    print(f"[{name}] 1/4: 20 steps", flush=True)
    first = Attempt([*common, "steps=20"], env, work / f"{name}-1.log")
    check(first.run() == 0, f"{name}: the first attempt failed (see {work / f'{name}-1.log'})")
    # the whole process is in the report: its total is the process's wall time, to 1 s
    total = report(Path(sys.executable).parent, run, store)["total_seconds"]
    print(f"[{name}] attempt 1: wall {first.wall:.2f}s, report total {total:.2f}s", flush=True)
    check(abs(first.wall - total) <= 1.0,
          f"{name}: report total {total:.2f}s vs process wall time {first.wall:.2f}s")
    print(f"[{name}] 2/4: a long run, SIGTERM once step {SIGTERM_STEP} is done", flush=True)
    Attempt([*common, "steps=100000"], env, work / f"{name}-2.log").run(
        sigterm_after_step=SIGTERM_STEP)
    print(f"[{name}] 3/4: resume to 30 steps", flush=True)
    check(Attempt([*common, "steps=30"], env, work / f"{name}-3.log").run() == 0,
          f"{name}: the resume failed")
    print(f"[{name}] 4/4: the same again: MaxText raises RuntimeError (already done)",
          flush=True)
    check(Attempt([*common, "steps=30"], env, work / f"{name}-4.log").run() != 0,
          f"{name}: the fourth attempt did not fail")
    seconds = time.monotonic() - t0

    r = report(venv_bin, run, store)
    bad = r["badput_seconds"]
    print(f"[{name}] report: total {r['total_seconds']:.2f}s, goodput "
          f"{r['goodput_percent']:.2f}%, " + ", ".join(
              f"{k} {v:.2f}s" for k, v in bad.items() if v), flush=True)
    check(r["total_seconds"] > 0 and r["productive_seconds"] > 0, f"{name}: no job time")
    for bucket in ("TPU_INITIALIZATION", "TRAINING_PREP", "PROGRAM_STARTUP",
                   "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME", "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
                   "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"):
        check(bad[bucket] > 0, f"{name}: {bucket} is {bad[bucket]}")
    check(bad["WASTED_PROGRESS_FROM_DISRUPTION"] > 0, f"{name}: no wasted progress")
    check(r["last_step"] == 29, f"{name}: last step {r['last_step']}")
    evs = events(venv_bin, run, store)
    causes = [e["disruption_cause"] for e in evs if "disruption_cause" in e]
    check(causes == ["sigterm", "exception:RuntimeError"], f"{name}: disruptions {causes}")
    check(r["disruptions"] >= 1, f"{name}: the report counts {r['disruptions']} disruptions")
    # two graceful attempts: MaxText's job end, then ours at exit (after SHUTDOWN)
    check(sum("job_end_time" in e for e in evs) == 4, f"{name}: job ends != 4")
    check(bad.get("CUSTOM_BADPUT_EVENTS", 0) > 0, f"{name}: no SHUTDOWN time")
    restores = [e for e in evs if e.get("event_type") == "restore"]
    check(len(restores) == 2, f"{name}: {len(restores)} restores recorded (expected 2)")

    sys.path.insert(0, str(ROOT))
    from tests.support.tfevents import read_scalars

    tags = read_scalars(str(out_dir / run / "tensorboard" / "goodput"))
    print(f"[{name}] TensorBoard tags: {sorted(tags)}", flush=True)
    for tag in ("goodput/goodput", "badput/program_startup",
                "badput/unproductive_checkpoint_save_time"):
        check(tag in tags, f"{name}: TensorBoard tag {tag} missing")
    return {"seconds": round(seconds), "goodput_percent": round(r["goodput_percent"], 2),
            "total_seconds": round(r["total_seconds"], 2),
            "badput_seconds": {k: round(v, 3) for k, v in bad.items() if v}}


def report_performance(base_cmd: List[str], env: Dict[str, str], work: Path,
                       store: str) -> None:
    """report_performance_metric_for_gcp_monitoring=true (and the heartbeat, and
    managed ML diagnostics): MaxText's own monitor helper writes to its read-only
    config, its GCPWorkloadMonitor needs Google credentials, its diagnostics Google's
    SDK; under the launcher the job completes, its step times and heartbeat become
    metrics of the run, and the diagnostics run is in its group."""
    log = work / "launcher-report-performance.log"
    run = "e2e-report-performance"
    attempt = Attempt([*base_cmd, CONFIG, *TINY, f"run_name={run}",
                       f"base_output_directory={work / 'out'}",
                       f"jax_cache_dir={work / 'jax_cache'}", "steps=5",
                       "report_performance_metric_for_gcp_monitoring=true",
                       "report_heartbeat_metric_for_gcp_monitoring=true",
                       "managed_mldiagnostics=true",
                       "managed_mldiagnostics_run_group=e2e-group",
                       "managed_mldiagnostics_on_demand_profiling=false"], env, log)
    code = attempt.run()
    text = log.read_text()
    check("monitor did not start" in text, f"{log}: no line about the monitor")
    check(code == 0 and "DefaultCredentialsError" not in text,
          f"report_performance_metric_for_gcp_monitoring=true: the job failed (see {log})")
    rep = json.loads(goodput_cli(env, "report", run, "--store", store, "--json"))
    for metric in ("workload_performance", "workload_heartbeat", "loss"):
        check(metric in rep["metrics"], f"{run}: metric {metric} missing")
    group = json.loads(goodput_cli(env, "runs", "--store", store, "--group", "e2e-group",
                                   "--json"))
    check([r["run"] for r in group["runs"]] == [run], f"e2e-group lists {group['runs']}")
    print("  report_performance/heartbeat/managed_mldiagnostics=true: completed; metrics "
          "and the run group recorded", flush=True)


def make_fork(work: Path) -> Path:
    """A copy of the installed maxtext package with the README's one-line helper."""
    import maxtext

    src = Path(maxtext.__file__).parent
    fork = work / "fork"
    shutil.rmtree(fork, ignore_errors=True)
    shutil.copytree(src, fork / "maxtext", ignore=shutil.ignore_patterns("__pycache__"))
    helper = fork / "maxtext" / "common" / "goodput.py"
    text = helper.read_text()
    header = text[:text.index('"""')]  # keep the licence header, replace the body
    helper.write_text(header + FORK_LINE)
    return fork


def inside(args: argparse.Namespace) -> int:
    from importlib.metadata import version

    work = Path(args.work).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    store = f"sqlite:///{work / 'goodput.sqlite'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOODPUT_")}
    env["JAX_PLATFORMS"] = "cpu"
    versions = {p: version(p) for p in ("maxtext", "jax", "orbax-checkpoint", "flax")}
    print(f"maxtext_e2e: {versions}, Python {sys.version.split()[0]}", flush=True)
    results = {"versions": versions, "install_seconds": int(args.install_seconds)}
    try:
        # the README's commands: the store as a launcher flag, then as a variable
        launcher = [sys.executable, "-m", "goodput_integrations.maxtext.launch",
                    "--goodput-store", store, "--", "python3", "-m", TRAIN_MODULE]
        results["launcher"] = scenario("launcher", launcher, env, work, store)
        report_performance(launcher, env, work, store)
        fork = make_fork(work)
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y",
                        "ml-goodput-measurement"], check=False)
        fork_env = dict(env, GOODPUT_STORE=store, PYTHONPATH=os.pathsep.join(
            p for p in (str(fork), env.get("PYTHONPATH", "")) if p))
        where = subprocess.run([sys.executable, "-c", "import maxtext.common.goodput as g; "
                                "print(g.__file__)"], env=fork_env, cwd=work,
                               capture_output=True, text=True, check=True).stdout.strip()
        check(where.startswith(str(fork)), f"the fork is not the maxtext imported ({where})")
        results["fork"] = scenario("fork", [sys.executable, "-m", TRAIN_MODULE], fork_env,
                                   work, store)
    except Failure as exc:
        print(f"maxtext_e2e: FAILED: {exc}", flush=True)
        return 1
    (work / "results.json").write_text(json.dumps(results, indent=2))
    print(f"maxtext_e2e: PASSED\n{json.dumps(results, indent=2)}", flush=True)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", help="a Python 3.12 interpreter for the environment")
    parser.add_argument("--venv", default=str(ROOT / "build" / "maxtext-venv"))
    parser.add_argument("--work", default=str(ROOT / "build" / "maxtext-e2e"))
    parser.add_argument("--maxtext", default=DEFAULT_SPEC, help="pip requirement for MaxText")
    parser.add_argument("--skip-install", action="store_true",
                        help="reuse the environment as it is")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--install-seconds", default="0", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return inside(args) if args.inside else bootstrap(args)


if __name__ == "__main__":
    sys.exit(main())
