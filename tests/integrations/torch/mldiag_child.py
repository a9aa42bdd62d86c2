"""A torchrun worker using the ML-diagnostics interface with framework=PYTORCH:
writes (as JSON, to ``RESULT_DIR/result-r<rank>.json``) the process index
ours and the real SDK's give before and after the process group exists,
then records metrics and one xprof session.

Run as ``torchrun ... mldiag_child.py STORE PROFILE_DIR RESULT_DIR``.

Each rank writes a file of its own: both ranks share torchrun's stdout, and
``print`` writes its text and its newline in two writes, so one rank's line
can land between the other's (``RESULT {...}RESULT {...}``).
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from goodput_core.compat.mldiagnostics import machinelearning_run, metrics, xprof
from goodput_core.compat.mldiagnostics import _system


def upstream_index():
    from google_cloud_mldiagnostics.custom_types.mlrun_types import Framework
    from google_cloud_mldiagnostics.utils import host_utils

    return host_utils.get_process_index(Framework.PYTORCH)


def main(store: str, profile_dir: str, result_dir: str) -> None:
    before = {"ours": _system.process_index("PYTORCH"), "sdk": upstream_index()}
    dist.init_process_group("gloo")
    after = {"ours": _system.process_index("PYTORCH"), "sdk": upstream_index()}
    run = machinelearning_run("Torch Diag", framework="PYTORCH", run_workload_id="w1",
                              store=store, profile_dir=profile_dir, region="us-central1")
    prof = xprof()
    prof.start(session_id="s1")  # the same id on every rank: one session
    x = torch.ones(64, 64)
    for step in range(3):
        x = x @ x / 64
        metrics.record("loss", float(x.sum()), step=step)
        dist.all_reduce(x)
    prof.stop()
    result = {"before": before, "after": after, "run": run.name,
              "index": run.process_index, "rank": dist.get_rank()}
    with open(os.path.join(result_dir, f"result-r{dist.get_rank()}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()


if __name__ == "__main__":
    main(*sys.argv[1:4])
