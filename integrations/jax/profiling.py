"""Profile capture around ``jax.profiler``, safe to leave in a training loop.

::

    from goodput_integrations.jax.profiling import ProfileCapture

    prof = ProfileCapture("/tmp/profiles", run_name="llama-8b")   # process 0 only
    with prof.session():                 # -> /tmp/profiles/llama-8b-0000/...
        for _ in range(3):
            state = train_step(state, batch)

    @prof.session()                      # as a decorator: one session per call
    def evaluate(...): ...

    prof.on_step(step, start_step=100, num_steps=5)   # or: inside the loop

``jax.profiler.start_trace(d)`` writes ``d/plugins/profile/<timestamp>/<host>.xplane.pb``
(and ``.trace.json.gz``); we pass ``d = <log_dir>/<session_id>``, so one
session of a multi-host job is one folder with a file per capturing host,
ready for TensorBoard's or XProf's profile plugin.

Session ids are the same on every host without any communication: either
given, or ``<run_name>-<n>`` where ``n`` counts the sessions this object
started; every process counts, capturing or not, so SPMD code that starts
sessions at the same points agrees on the ids.

Only processes in ``process_indices`` (default ``(0,)``; None: all) capture.
Nothing here raises into the training loop: a failure (a profile already
running, an unwritable directory) is logged once and the call returns None.

On-demand capture: :func:`start_server` starts jax's profiler server (for
TensorBoard's "Capture profile" or ``jax.collect_profile``). jax offers no
bind address: the server listens on **all interfaces** (checked on jax
0.10.2: ``*:<port>``), so start it only on trusted networks or firewall the
port; it runs only on the chosen processes.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from typing import Any, Callable, Iterator, Optional, Sequence, Union

from goodput_integrations.jax import _probe

__all__ = ["ProfileCapture", "start_server", "stop_server"]

IndexSource = Union[None, int, Callable[[], int]]
_SAFE = re.compile(r"[^A-Za-z0-9_.=-]+")


def _this_process(index: IndexSource) -> int:
    """This process's index (asked lazily: jax is up when a profile starts)."""
    if callable(index):
        return int(index())
    if index is not None:
        return int(index)
    import jax

    return int(jax.process_index())


def _chosen(indices: Optional[Sequence[int]], index: IndexSource) -> bool:
    return indices is None or _this_process(index) in set(indices)


class ProfileCapture:
    """Starts and stops ``jax.profiler`` traces on chosen processes.

    Args:
      log_dir: where sessions go (``<log_dir>/<session_id>/``): a local
        path, or a URL where jax's file system supports it (not created here).
      run_name: prefix of the generated session ids (made filename-safe).
      process_indices: the processes that capture (None: every process).
      process_index: this process's index, or a function returning it
        (default: ``jax.process_index()`` at the first start).
      create_perfetto_trace: passed to ``jax.profiler.start_trace``.
    """

    def __init__(self, log_dir: Union[str, os.PathLike], *, run_name: str = "profile",
                 process_indices: Optional[Sequence[int]] = (0,),
                 process_index: IndexSource = None, create_perfetto_trace: bool = False):
        self.log_dir = os.fspath(log_dir)
        self.run_name = _SAFE.sub("_", str(run_name)).strip("_.") or "profile"
        self.process_indices = None if process_indices is None else tuple(process_indices)
        self._index = process_index
        self._perfetto = bool(create_perfetto_trace)
        self._lock = threading.Lock()
        self._count = 0
        self.active: Optional[str] = None   # directory of the running session
        self.session_id: Optional[str] = None
        self.sessions: list = []            # directories of finished sessions

    def next_session_id(self) -> str:
        """The id the next :meth:`start` without an explicit id will use."""
        return f"{self.run_name}-{self._count:04d}"

    def start(self, session_id: Optional[str] = None) -> Optional[str]:
        """Starts a trace session (never raises).

        Args:
          session_id: the session's folder name (default: the next generated id).

        Returns:
          The session directory on a capturing process, else None (not a
          chosen process, a session already running, or a failure).
        """
        with self._lock:
            sid = _SAFE.sub("_", session_id) if session_id else self.next_session_id()
            self._count += 1  # on every process: ids stay aligned across hosts
            if self.active is not None:
                _probe.log_once(f"profile-nested:{id(self)}", "goodput: a profile session "
                                "is already running; %s not started", sid, exc_info=False)
                return None
            try:
                if not _chosen(self.process_indices, self._index):
                    return None
                path = self._session_path(sid)
                if "://" not in path:
                    os.makedirs(path, exist_ok=True)
                self._start_trace(path, sid)
            except Exception:
                _probe.log_once("profile-start", "goodput: starting a profile failed")
                return None
            self.active, self.session_id = path, sid
            return path

    def stop(self) -> Optional[str]:
        """Stops the running session (never raises).

        Returns:
          Its directory, or None when this object had none running (or the
          stop failed).
        """
        with self._lock:
            path, self.active = self.active, None
            if path is None:
                return None
            try:
                import jax

                jax.profiler.stop_trace()
                path = self._finish(path, self.session_id)
            except Exception:
                _probe.log_once("profile-stop", "goodput: stopping a profile failed")
                return None
            self.sessions.append(path)
            return path

    # Hooks for subclasses that lay sessions out differently (the ML-diagnostics
    # interface's xprof: goodput_integrations.jax.xprof_sessions).
    def _session_path(self, session_id: str) -> str:
        """The directory ``jax.profiler.start_trace`` writes the session to."""
        return os.path.join(self.log_dir, session_id)

    def _start_trace(self, path: str, session_id: str) -> None:
        import jax

        jax.profiler.start_trace(path, create_perfetto_trace=self._perfetto)

    def _finish(self, path: str, session_id: str) -> str:
        """Called after ``stop_trace``; returns the session's final directory."""
        return path

    @contextlib.contextmanager
    def session(self, session_id: Optional[str] = None) -> Iterator[Optional[str]]:
        """A trace session around a block, or around each call as a decorator.

        Yields:
          The session directory on a capturing process, else None.
        """
        path = self.start(session_id)
        try:
            yield path
        finally:
            if path is not None:
                self.stop()

    def on_step(self, step: int, start_step: int, num_steps: int = 1) -> None:
        """Call at the start of every step: captures steps ``[start_step,
        start_step + num_steps)`` as one session (never raises).

        Args:
          step: the step about to run.
          start_step: the first profiled step.
          num_steps: how many steps to profile.
        """
        if step == start_step:
            self.start()
        elif step == start_step + num_steps and self.active is not None:
            self.stop()


_server_lock = threading.Lock()
_server: Any = None


def start_server(port: int, *, process_indices: Optional[Sequence[int]] = (0,),
                 process_index: IndexSource = None) -> Any:
    """Starts jax's profiler server for on-demand capture (never raises).

    The server listens on all interfaces (jax has no bind-address option):
    see the module docstring.

    Args:
      port: the TCP port.
      process_indices: the processes that serve (None: every process).
      process_index: this process's index or a function returning it.

    Returns:
      The server object on a serving process, else None.
    """
    global _server
    with _server_lock:
        if _server is not None:
            return _server
        try:
            if not _chosen(process_indices, process_index):
                return None
            import jax

            _server = jax.profiler.start_server(int(port))
        except Exception:
            _probe.log_once("profile-server", "goodput: starting the profiler server failed")
            return None
        return _server


def stop_server() -> None:
    """Stops the server :func:`start_server` started (no-op otherwise; never raises)."""
    global _server
    with _server_lock:
        if _server is None:
            return
        _server = None
        try:
            import jax

            jax.profiler.stop_server()
        except Exception:
            _probe.log_once("profile-server-stop", "goodput: stopping the profiler server failed")
