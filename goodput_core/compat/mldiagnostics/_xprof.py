"""``xprof``: programmatic profile capture, the SDK's class, on jax's profiler.

::

    with xprof():                       # a session around a block
        train()

    @xprof()                            # a session around each call
    def evaluate(): ...

    prof = xprof(process_index_list=[0, 2])   # only processes 0 and 2 capture
    prof.start(session_id="s1")               # the same id on every host: one session
    prof.stop()

Sessions go to the run's ``profile_dir`` in XProf's layout
(``<profile_dir>/plugins/profile/<session_id>/<host>.p<index>.xplane.pb``:
``tensorboard --logdir <profile_dir>`` or ``xprof`` opens them), printed once
per run. With ``gcs_path="gs://..."`` each finished session is also
uploaded to ``<gcs_path>/<run>/plugins/profile/<session_id>/`` in the
background when google-cloud-storage is installed (else it stays local and
that is printed). Without ``session_id`` the id is the local time
(``%Y%m%d_%H%M%S_%f``), as the SDK: separate sessions per host.

jax is imported only when a session starts (``goodput_core`` never imports
it on its own); the jax side lives in ``goodput_integrations.jax.xprof_sessions``.
As the SDK, starting a session without a run, or with a run that has no
place for traces (no ``gcs_path``; ours: ``profile_dir=`` or
``$GOODPUT_PROFILE_DIR`` count too), raises ``ProfilingError`` before the
block runs: a clear error at the API's edge. Otherwise nothing here raises
into training: without jax, or when jax fails, the reason is logged once
and the block runs unprofiled.
"""

from __future__ import annotations

import datetime
import functools
import logging
import sys
import threading
from typing import Any, Optional, Sequence

from goodput_core.compat.mldiagnostics import _state, _system
from goodput_core.compat.mldiagnostics._frameworks import adapter
from goodput_core.compat.mldiagnostics.custom_types.exceptions import ProfilingError
from goodput_core.compat.mldiagnostics._gcs import upload_in_background

logger = logging.getLogger("goodput")

__all__ = ["Xprof", "start_on_demand", "stop_on_demand"]

_NO_RUN = ("No active ML run found for profiling. Please initialize an ML run "
           "or provide a valid ML run with a configured GCS path.")
_NO_PATH = ("No GCS path found for profiling. Please provide a valid ML run with a GCS path "
            "(or, ours, machinelearning_run(profile_dir=...) or $GOODPUT_PROFILE_DIR).")
_printed: set = set()
_lock = threading.Lock()


def _warn_once(key: str, msg: str, *args: Any) -> None:
    _state._warn_once(f"xprof:{key}", "goodput: xprof: " + msg, *args)


def _announce(run: Any, remote: Optional[str]) -> None:
    """Prints where a run's profiles go, once per run."""
    with _lock:
        if run.profile_dir in _printed:
            return
        _printed.add(run.profile_dir)
    where = run.profile_dir + (f" (uploaded to {remote})" if remote else "")
    print(f"goodput: profiles of run {run.name!r} go to {where}; view them with: "
          f"tensorboard --logdir {run.profile_dir}", file=sys.stderr)


def _uploader(run: Any) -> Optional[str]:
    """The ``gs://`` folder sessions are uploaded to, or None (printed once why)."""
    if not run.gcs_path or not run.gcs_path.startswith("gs://"):
        return None
    try:
        import google.cloud.storage  # noqa: F401
    except ImportError:
        _warn_once(f"no-gcs:{run.gcs_path}", "google-cloud-storage is not installed: "
                   "profiles stay in %s (pip install google-cloud-storage to upload to %s)",
                   run.profile_dir, run.gcs_path)
        return None
    return f"{run.gcs_path}/{run.name}"


class Xprof:
    """The SDK's profiler object (see the module docstring).

    Args:
      run: the run to profile (default: the active run, looked up when a
        session starts).
      process_index_list: the processes that capture (None: every process).
    """

    def __init__(self, run: Any = None, process_index_list: Optional[Sequence[int]] = None):
        self._input_run = run
        self._process_index_list = (None if process_index_list is None
                                    else [int(i) for i in process_index_list])
        self._capture: Any = None
        self._capture_run: Any = None
        self._remote: Optional[str] = None
        self._is_profiling = False
        self.session_dir: Optional[str] = None  # ours: the last finished session's folder

    def _resolve(self) -> Any:
        run = self._input_run if self._input_run is not None else _state.active_run()
        if run is None:
            raise ProfilingError(_NO_RUN)
        if not run.profile_target:
            raise ProfilingError(_NO_PATH)
        if run.metric_only_run:
            return None
        if self._capture is not None and self._capture_run is run:
            return self._capture
        pytorch = getattr(run.framework, "value", None) == "PYTORCH"
        try:
            if pytorch:
                Sessions = adapter("torch.profiling").TorchProfileSessions
            else:
                Sessions = adapter("jax.xprof_sessions").XprofSessions
        except Exception:
            _warn_once("no-framework", "profiling needs %s; this block runs unprofiled",
                       "torch" if pytorch else "jax (pip install 'goodput-core[jax]')")
            return None
        remote = _uploader(run)
        on_session = None
        if remote is not None:
            on_session = functools.partial(upload_in_background, run.profile_dir, remote)
        self._capture = Sessions(run.profile_dir, process_indices=self._process_index_list,
                                 process_index=run.process_index, on_session=on_session)
        self._capture_run, self._remote = run, remote
        return self._capture

    def start(self, session_id: Optional[str] = None) -> None:
        """Starts a session.

        Args:
          session_id: the session's id; the same id on several hosts makes
            one multi-host session. Default: the local time.

        Raises:
          ProfilingError: no run, or a run with no place for traces (as the SDK).
        """
        if self._is_profiling:
            _warn_once("already", "Profiling is already active. Call stop() first.")
            return
        try:
            capture = self._resolve()
            if capture is None:
                return
            sid = session_id or datetime.datetime.now().strftime("%Y%m%d_%H%M%S_%f")
            self._is_profiling = capture.start(str(sid)) is not None
            if self._is_profiling:
                _announce(self._capture_run, self._remote)
        except ProfilingError:
            raise
        except Exception:
            _warn_once("start", "starting a session failed")

    def stop(self) -> None:
        """Stops the session this object started (never raises)."""
        if not self._is_profiling:
            return
        self._is_profiling = False
        try:
            self.session_dir = self._capture.stop()
            if self.session_dir:
                logger.info("goodput: profiling traces are in %s", self.session_dir)
        except Exception:
            _warn_once("stop", "stopping a session failed")

    def __enter__(self) -> "Xprof":
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop()

    def __call__(self, func):
        """As a decorator: one session around each call."""

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            self.start()
            try:
                return func(*args, **kwargs)
            finally:
                self.stop()

        return wrapper


def start_on_demand(processes: Optional[Sequence[int]], process_index: Optional[int] = None,
                    port: int = 9999) -> bool:
    """Starts jax's profiler server on ``port`` (the SDK's 9999) on
    ``processes``, by process index; None: on local rank 0 of each host
    (as the SDK: processes sharing a host would clash on the port). It
    listens on all interfaces (jax has no bind-address option). Returns
    whether it started; never raises."""
    if processes is None and _system.local_rank() != 0:
        logger.info("goodput: on-demand profiler server skipped on local rank %d (it runs on "
                    "local rank 0 of each host)", _system.local_rank())
        return False
    active = _state.current()
    if active is not None and active.run.framework.value == "PYTORCH":
        # the SDK's PyTorch server is torch_tpu's (TPUs only); nothing to start here
        _warn_once("no-torch-server", "on_demand_xprof with framework=PYTORCH: the SDK serves "
                   "it with torch_tpu's profiler server (TPUs only); not started")
        return False
    try:
        profiling = adapter("jax.profiling")
    except Exception:
        _warn_once("no-jax-server", "on_demand_xprof needs jax (pip install 'goodput-core[jax]')")
        return False
    server = profiling.start_server(port, process_indices=processes,
                                    process_index=process_index)
    if server is not None:
        logger.warning("goodput: on-demand profiler server on port %d, all interfaces "
                       "(firewall it on untrusted networks)", port)
    return server is not None


def stop_on_demand() -> None:
    """Stops the server :func:`start_on_demand` started (never raises)."""
    try:
        adapter("jax.profiling").stop_server()
    except Exception:
        _warn_once("stop-server", "stopping the profiler server failed")
