"""Profile sessions with the PyTorch profiler, for the ML-diagnostics ``xprof``.

The diagnostics SDK's PyTorch engine (google-cloud-mldiagnostics 1.0.10,
``core/xprof.py``) starts ``torch.profiler.profile`` with a TPU profiler
configuration (``torch.tpu.profiler.TpuProfilerConfig``: torch on TPUs
only; elsewhere its start fails) and calls ``torch.distributed.barrier()``
around start and stop when a process group exists, so that every rank's
session covers the same steps. :class:`TorchProfileSessions` does the same
with the profiler every torch build has: CPU activity, plus CUDA when CUDA
is available, and writes each session as a Chrome trace,
``<log_dir>/plugins/profile/<session_id>/<host>.p<index>.pt.trace.json``
(one file per capturing process, in the folder layout of the JAX sessions:
Perfetto or ``chrome://tracing`` open it). Nothing here raises into the
training loop: a failure is logged once and the block runs unprofiled.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from typing import Any, Callable, List, Optional, Sequence

from goodput_integrations.torch import _probe

__all__ = ["TorchProfileSessions"]

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _barrier() -> None:
    """As the SDK: line the ranks up when a process group exists."""
    if _probe.dist_initialized():
        import torch

        torch.distributed.barrier()


class TorchProfileSessions:
    """Starts and stops PyTorch profiler sessions on chosen processes.

    Args:
      log_dir: a local directory (the run's profile directory).
      process_indices: the processes that capture (None: every process).
      process_index: this process's index (default: the rank).
      on_session: called as ``on_session(session_dir, files)`` after each
        session was written (e.g. an upload); its failures are logged once.
    """

    def __init__(self, log_dir: str, *, process_indices: Optional[Sequence[int]] = None,
                 process_index: Optional[int] = None,
                 on_session: Optional[Callable[[str, List[str]], None]] = None):
        self.log_dir = os.fspath(log_dir)
        self.process_indices = None if process_indices is None else tuple(process_indices)
        self._index = process_index
        self._on_session = on_session
        self._lock = threading.Lock()
        self._profiler: Any = None
        self.session_id: Optional[str] = None
        self.sessions: List[str] = []

    def _this_process(self) -> int:
        return int(self._index if self._index is not None else (_probe.process_index() or 0))

    def start(self, session_id: str) -> Optional[str]:
        """Starts a session (never raises); its folder, or None when this
        process does not capture or a session is running."""
        with self._lock:
            if self._profiler is not None:
                _probe.log_once("torch-profile-nested", "goodput: a profile session is "
                                "already running", exc_info=False)
                return None
            if self.process_indices is not None and \
                    self._this_process() not in self.process_indices:
                return None
            try:
                import torch

                activities = [torch.profiler.ProfilerActivity.CPU]
                if torch.cuda.is_available():
                    activities.append(torch.profiler.ProfilerActivity.CUDA)
                profiler = torch.profiler.profile(activities=activities)
                _barrier()
                profiler.start()
            except Exception:
                _probe.log_once("torch-profile-start", "goodput: starting the PyTorch "
                                "profiler failed")
                return None
            self._profiler, self.session_id = profiler, _SAFE.sub("_", str(session_id))
            return os.path.join(self.log_dir, "plugins", "profile", self.session_id)

    def stop(self) -> Optional[str]:
        """Stops the running session and writes its trace (never raises);
        the session folder, or None."""
        with self._lock:
            profiler, self._profiler = self._profiler, None
            if profiler is None:
                return None
            try:
                _barrier()
                profiler.stop()
                folder = os.path.join(self.log_dir, "plugins", "profile", self.session_id)
                os.makedirs(folder, exist_ok=True)
                path = os.path.join(
                    folder, f"{socket.gethostname()}.p{self._this_process()}.pt.trace.json")
                profiler.export_chrome_trace(path)
            except Exception:
                _probe.log_once("torch-profile-stop", "goodput: stopping the PyTorch "
                                "profiler failed")
                return None
            self.sessions.append(folder)
        if self._on_session is not None:
            try:
                self._on_session(folder, [path])
            except Exception:
                _probe.log_once("torch-profile-on-session", "goodput: handing a profile "
                                "session on failed (the files stay in %s)", folder)
        return folder
