"""The parent side of the demo job: start attempts, read their progress, crash and restart.

Example::

    from goodput_core.cli.demo_attempts import DemoConfig, run_crash_and_restart

    cfg = DemoConfig(store="/tmp/g.sqlite", run="demo-1", workdir="/tmp/ckpt")
    summary = run_crash_and_restart(cfg, on_message=print)

:class:`Attempt` runs one child process (:mod:`goodput_integrations.demo.train`)
and yields its protocol messages as they arrive; the parent can kill it with
SIGKILL at any message (the R1 test does, at random ones). Everything the
child prints goes to its log file: stderr (absl, Orbax and JAX logging)
directly, never to a pipe nobody reads, and every stdout line (protocol
messages included) as the parent reads it. Nothing here imports jax: the
parent stays light.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional

#: Every protocol line of the child starts with this (the child:
#: :mod:`goodput_integrations.demo.train`, which imports it from here).
PROTOCOL_PREFIX = "@goodput-demo "
#: ``python -m`` target of one attempt: run as a program, never imported here.
TRAIN_MODULE = "goodput_integrations.demo.train"


__all__ = ["Attempt", "DemoConfig", "DemoError", "child_command", "child_env",
           "frameworks_missing", "run_crash_and_restart"]

_FRAMEWORKS = ("jax", "flax", "optax", "orbax.checkpoint")


class DemoError(RuntimeError):
    """An attempt did not end the way the demo expected (the message says how)."""


def frameworks_missing() -> List[str]:
    """The modules the demo job needs that cannot be found (without importing them)."""
    import importlib.util

    missing = []
    for name in _FRAMEWORKS:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package is missing
            found = False
        if not found:
            missing.append(name)
    return missing


@dataclasses.dataclass
class DemoConfig:
    """Settings of the demo job (the child's command-line options).

    The defaults take about 45 ms a step on two CPU cores: 240 steps, a
    checkpoint every 20, a crash 15 steps after the checkpoint at step 140.
    """

    store: str
    run: str
    workdir: str
    steps: int = 240
    save_every: int = 20
    crash_at: Optional[int] = 155
    eval_every: int = 80
    sync_every: int = 1        # on CPU, per-step times are honest only when synced
    flush_every: int = 0
    sync_checkpoints: bool = False
    batch_size: int = 1024
    features: int = 256
    hidden: int = 1024
    seed: int = 0
    log_dir: Optional[str] = None  # child stderr goes here (default: the workdir)

    def options(self, crash: bool) -> List[str]:
        """The child's command-line options (``--crash-at`` only when ``crash``)."""
        out = ["--store", str(self.store), "--run", self.run, "--workdir", str(self.workdir),
               "--steps", str(self.steps), "--save-every", str(self.save_every),
               "--eval-every", str(self.eval_every), "--sync-every", str(self.sync_every),
               "--flush-every", str(self.flush_every), "--batch-size", str(self.batch_size),
               "--features", str(self.features), "--hidden", str(self.hidden),
               "--seed", str(self.seed)]
        if self.sync_checkpoints:
            out.append("--sync-checkpoints")
        if crash and self.crash_at is not None:
            out += ["--crash-at", str(self.crash_at)]
        return out


def child_command(options: List[str]) -> List[str]:
    """``python -m goodput_integrations.demo.train <options>`` with this interpreter."""
    return [sys.executable, "-m", TRAIN_MODULE, *options]


def child_env(base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The child's environment: CPU only (unless the caller chose a platform),
    unbuffered output and quieter XLA logging."""
    env = dict(os.environ if base is None else base)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def parse_line(line: str) -> Optional[Dict[str, Any]]:
    """The protocol message on ``line``, or None for any other output."""
    if not line.startswith(PROTOCOL_PREFIX):
        return None
    try:
        msg = json.loads(line[len(PROTOCOL_PREFIX):])
    except ValueError:
        return None
    return msg if isinstance(msg, dict) and "event" in msg else None


class Attempt:
    """One child process running one attempt of the demo job.

    Args:
      options: the child's command-line options (see :meth:`DemoConfig.options`).
      log_path: where everything the child prints goes (appended).
      env: the environment (default :func:`child_env`).

    Attributes:
      messages: every protocol message read so far, in order.
      attempt_id: the recorder's attempt id, once the child reported it.
    """

    def __init__(self, options: List[str], log_path: str, env: Optional[Dict[str, str]] = None):
        self.log_path = log_path
        os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
        self.messages: List[Dict[str, Any]] = []
        self.attempt_id: Optional[str] = None
        self.killed = False
        # private (0600) like every file the tool writes; a planted symlink is refused
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
        with open(os.open(log_path, flags, 0o600), "ab") as log:
            self.proc = subprocess.Popen(
                child_command(options), stdout=subprocess.PIPE, stderr=log,
                stdin=subprocess.DEVNULL, env=env if env is not None else child_env(),
                text=True, bufsize=1)
        # the child's stdout, line by line as we read it (line-buffered: a
        # crash of the parent loses nothing already read)
        self._log = open(os.open(log_path, flags, 0o600), "a", encoding="utf-8", buffering=1)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read(self) -> Iterator[Dict[str, Any]]:
        """Yields protocol messages as the child writes them, until its stdout closes."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not self._log.closed:
                self._log.write(line)
            msg = parse_line(line.rstrip("\n"))
            if msg is None:
                continue
            if msg["event"] == "attempt":
                self.attempt_id = msg.get("attempt")
            self.messages.append(msg)
            yield msg

    def kill(self) -> None:
        """Sends SIGKILL (a real crash: the child runs nothing more)."""
        self.killed = True
        try:
            os.kill(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # it already ended
            pass

    def wait(self, timeout: Optional[float] = None) -> int:
        """Reads what is left of stdout, waits for the exit; returns the exit status
        (negative: killed by that signal)."""
        for _ in self.read():
            pass
        rc = self.proc.wait(timeout)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        return rc

    def last(self, event: str) -> Optional[Dict[str, Any]]:
        """The last message of kind ``event`` (None if there was none)."""
        for msg in reversed(self.messages):
            if msg["event"] == event:
                return msg
        return None

    def log_tail(self, lines: int = 20) -> str:
        """The end of the child's log (for error messages)."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


def run_crash_and_restart(cfg: DemoConfig,
                          on_message: Optional[Callable[[int, Dict[str, Any]], None]] = None
                          ) -> Dict[str, Any]:
    """Plays the demo job: attempt 1 crashes at ``cfg.crash_at``, attempt 2
    resumes from the last checkpoint and trains to the end.

    Args:
      cfg: the job's settings.
      on_message: called with ``(attempt number from 1, message)`` for every
        message of the children, as it arrives (a progress bar).

    Returns:
      ``{"attempts": [{"attempt", "returncode", "messages"}...], "crash_step",
      "restored_step", "final_loss"}``.

    Raises:
      DemoError: an attempt ended otherwise than planned (the child's log
        tail is in the message).
    """
    log_dir = cfg.log_dir or cfg.workdir
    out: Dict[str, Any] = {"attempts": []}
    plan = [True, False] if cfg.crash_at is not None else [False]
    for number, crash in enumerate(plan, start=1):
        att = Attempt(cfg.options(crash), os.path.join(log_dir, f"attempt-{number}.log"))
        for msg in att.read():
            if on_message is not None:
                on_message(number, msg)
        rc = att.wait()
        out["attempts"].append({"attempt": att.attempt_id, "returncode": rc,
                                "messages": att.messages})
        crashed = att.last("crash")
        if crash and crashed is not None:
            if rc != -signal.SIGKILL:
                raise DemoError(f"attempt {number} announced a crash but exited with {rc}")
            out["crash_step"] = crashed["step"]
            continue
        if rc != 0 or att.last("done") is None:
            raise DemoError(f"attempt {number} failed (exit status {rc}); the end of its log "
                            f"{att.log_path}:\n{att.log_tail()}")
        restored = att.last("restored")
        out["restored_step"] = restored["step"] if restored else None
        out["final_loss"] = att.last("done").get("loss")
        break  # trained to the end (also when crash_at lay beyond the last step)
    return out
