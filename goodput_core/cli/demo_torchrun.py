"""``goodput demo --torch``: the PyTorch job under real torchrun, a rank killed, a restart.

Runs ``python -m torch.distributed.run --standalone --nproc-per-node 2
--max-restarts 1 -m goodput_integrations.demo.torch_train ...``: two ranks
(gloo, DDP, ``torch.compile``, DCP checkpoints) record into one run (rank 0
writes); in the first attempt rank 1 kills itself with SIGKILL after
``crash_at``; torchrun stops rank 0 (its disruption is recorded), restarts
both, and they resume from the last DCP checkpoint to the end. Rank 0
reports its progress on stdout with the demo's protocol
(:mod:`goodput_core.cli.demo_attempts`); everything else torchrun and the ranks
print goes to the log file. Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from typing import Any, Callable, Dict, List, Optional

from goodput_core.cli.demo_attempts import DemoError, child_env, parse_line

__all__ = ["TorchDemoConfig", "run_torchrun_crash_and_restart", "torch_missing"]

TORCH_TRAIN_MODULE = "goodput_integrations.demo.torch_train"


def torch_missing() -> bool:
    """True when torch cannot be found (without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is None
    except (ImportError, ValueError):
        return True


@dataclasses.dataclass
class TorchDemoConfig:
    """Settings of the torchrun demo job."""

    store: str
    run: str
    workdir: str
    steps: int = 120
    save_every: int = 20
    crash_at: int = 75
    compile: str = "aot_eager"
    log_path: Optional[str] = None

    def command(self) -> List[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", "2", "--max-restarts", "1", "--monitor-interval", "0.2",
                "-m", TORCH_TRAIN_MODULE, "--store", str(self.store), "--run-name", self.run,
                "--ckpt-dir", os.path.join(self.workdir, "dcp"), "--steps", str(self.steps),
                "--save-every", str(self.save_every), "--compile", self.compile,
                "--workers", "1", "--load-ms", "10", "--kill-at", str(self.crash_at),
                "--kill-rank", "1", "--protocol"]


def run_torchrun_crash_and_restart(
        cfg: TorchDemoConfig,
        on_message: Optional[Callable[[int, Dict[str, Any]], None]] = None) -> Dict[str, Any]:
    """Plays the torchrun demo job (module docstring).

    Returns:
      ``{"messages": [...], "crash_step", "restored_step", "final_loss", "returncode"}``.

    Raises:
      DemoError: torchrun failed (the log's tail is in the message).
    """
    log_path = cfg.log_path or os.path.join(cfg.workdir, "torchrun.log")
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
    env = child_env()
    env.setdefault("OMP_NUM_THREADS", "1")
    out: Dict[str, Any] = {"messages": []}
    attempt = 1
    with open(os.open(log_path, flags, 0o600), "a", encoding="utf-8", buffering=1) as log:
        proc = subprocess.Popen(cfg.command(), stdout=subprocess.PIPE, stderr=log,
                                stdin=subprocess.DEVNULL, env=env, text=True, bufsize=1,
                                cwd=cfg.workdir)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            msg = parse_line(line.rstrip("\n"))
            if msg is None:
                continue
            if msg["event"] == "attempt":
                attempt = int(msg.get("restart", 0)) + 1
            elif msg["event"] == "crash":
                out["crash_step"] = msg["step"]
            elif msg["event"] == "restored":
                out["restored_step"] = msg["step"]
            elif msg["event"] == "done":
                out["final_loss"] = msg.get("loss")
            out["messages"].append(msg)
            if on_message is not None:
                on_message(attempt, msg)
        out["returncode"] = proc.wait()
    if out["returncode"] != 0 or "final_loss" not in out:
        try:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                tail = "".join(f.readlines()[-30:])
        except OSError:
            tail = ""
        raise DemoError(f"torchrun failed (exit status {out['returncode']}); the end of its "
                        f"log {log_path}:\n{tail}")
    return out
