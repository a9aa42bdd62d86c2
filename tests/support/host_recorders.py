"""Several hosts recording one run in this process, in lockstep (the ground-truth
simulator's ``per_host`` recording, tests/support/ground_truth_sim.py).

Each host is a :class:`~goodput_core.record.recorder.Recorder` with a host name
of its own (``sim-host-<i>``), on one shared fake clock; :class:`Hosts` sends
every call to each of them at the same (fake) time.
"""

from __future__ import annotations

import contextlib
from typing import List
from unittest import mock

from goodput_core.record.recorder import Recorder


class Hosts:
    """Several lockstep hosts recording one run: every call goes to each
    host's recorder at the same (fake) time, as with ``per_host`` recording.
    Host ``i`` records its first job start under index 0 and then learns its
    index (a JAX host's index is known after ``jax.distributed`` starts); a
    disruption is recorded by the last host only (the host that failed)."""

    def __init__(self, recorders: List[Recorder]):
        self.recorders = recorders
        self.lead, self.last = recorders[0], recorders[-1]

    def __getattr__(self, name):
        def every(*args, **kwargs):
            out = [getattr(r, name)(*args, **kwargs) for r in self.recorders]
            if name == "record_job_start_time":
                for i, r in enumerate(self.recorders):
                    r.process_index = i
            return out[0]
        return every

    def record_disruption(self, cause):
        self.last.record_disruption(cause)

    def stall(self, host: int, a: float, b: float) -> None:
        """Host ``host`` alone records an input stall ``[a, b)``."""
        self.recorders[host].record_input_stall_start_time(a)
        self.recorders[host].record_input_stall_end_time(b)

    def data_loading(self, overlapped=False):
        stack = contextlib.ExitStack()
        for r in self.recorders:
            stack.enter_context(r.data_loading(overlapped=overlapped))
        return stack


def host_recorders(run: str, store: str, clock, writers: int) -> List[Recorder]:
    """One strict recorder per simulated host (``sim-host-<i>``), heartbeats off
    (the simulator records them on the fake clock)."""
    out = []
    for i in range(writers):  # one writer process per simulated host
        with mock.patch("socket.gethostname", return_value=f"sim-host-{i}"):
            out.append(Recorder(run, store, clock=clock, strict=True, heartbeat_seconds=0))
    return out
