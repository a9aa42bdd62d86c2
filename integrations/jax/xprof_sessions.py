"""Profile sessions laid out as XProf and TensorBoard's profile plugin read them.

``XprofSessions(log_dir)`` writes session ``S`` of process ``i`` on host
``H`` to ``<log_dir>/plugins/profile/S/H.p<i>.xplane.pb`` (and
``.trace.json.gz``): ``tensorboard --logdir <log_dir>`` (or ``xprof``) lists
each session once, with one entry per capturing process. Processes that
start a session with the same id share its folder: that is how a
multi-host (or multi-process) capture becomes one session.

jax itself names the files after the host only, so two processes on one
host would overwrite each other's trace; each process therefore traces into
its own staging folder (``<log_dir>/.staging/``) and moves its files into
the session folder, with the process index in the name, when it stops.
Used by :mod:`goodput_core.compat.mldiagnostics` (``xprof``); like
:class:`~goodput_integrations.jax.profiling.ProfileCapture`, which it
extends, nothing here raises into the training loop.
"""

from __future__ import annotations

import os
import shutil
from typing import Callable, List, Optional

from goodput_integrations.jax import _probe
from goodput_integrations.jax.profiling import ProfileCapture, _this_process

__all__ = ["XprofSessions", "TRACE_SUFFIXES"]

#: Suffixes of the files jax writes per host (the process tag goes before them).
TRACE_SUFFIXES = (".xplane.pb", ".trace.json.gz", ".memory_profile.json.gz")


class XprofSessions(ProfileCapture):
    """Profile sessions in XProf's layout (see the module docstring).

    Args:
      log_dir: a local directory (the run's profile directory).
      process_indices: the processes that capture (None: every process).
      process_index: this process's index, or a function returning it.
      on_session: called as ``on_session(session_dir, files)`` after each
        session is in place (e.g. an upload); its failures are logged once.
    """

    def __init__(self, log_dir, *, process_indices=None, process_index=None,
                 on_session: Optional[Callable[[str, List[str]], None]] = None):
        super().__init__(log_dir, run_name="xprof", process_indices=process_indices,
                         process_index=process_index)
        self._on_session = on_session

    def _tag(self) -> str:
        return f".p{_this_process(self._index)}"

    def _session_path(self, session_id: str) -> str:
        return os.path.join(self.log_dir, ".staging", f"{session_id}{self._tag()}.{os.getpid()}")

    def _start_trace(self, path: str, session_id: str) -> None:
        import jax

        options = jax.profiler.ProfileOptions()
        options.session_id = session_id
        jax.profiler.start_trace(path, profiler_options=options)

    def _finish(self, path: str, session_id: str) -> str:
        src = os.path.join(path, "plugins", "profile", session_id)
        dst = os.path.join(self.log_dir, "plugins", "profile", session_id)
        os.makedirs(dst, exist_ok=True)
        tag, moved = self._tag(), []
        for name in sorted(os.listdir(src)):
            suffix = next((s for s in TRACE_SUFFIXES if name.endswith(s)), None)
            new = (name[:-len(suffix)] + tag + suffix) if suffix else f"{tag[1:]}.{name}"
            os.replace(os.path.join(src, name), os.path.join(dst, new))
            moved.append(os.path.join(dst, new))
        shutil.rmtree(path, ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(path))  # the staging folder, once no process uses it
        except OSError:
            pass
        if self._on_session is not None:
            try:
                self._on_session(dst, moved)
            except Exception:
                _probe.log_once("xprof-on-session", "goodput: handing a profile session on "
                                "failed (the files stay in %s)", dst)
        return dst
