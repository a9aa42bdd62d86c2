"""The ML-diagnostics interface's PyTorch path on our compat, under real
torchrun (two ranks, gloo): the process index is the SDK's (its own function,
installed from PyPI, asked in the same process), only rank 0 records the
job, hardware facts come from torch, and ``xprof`` writes one PyTorch
profiler trace per rank into one session."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("google_cloud_mldiagnostics")

from goodput_core import open_store  # noqa: E402
from goodput_core.events import Kind  # noqa: E402

from tests.integrations.torch.conftest import ROOT, child_env  # noqa: E402

CHILD = ROOT / "tests" / "integrations" / "torch" / "mldiag_child.py"


@pytest.mark.timeout(600)
def test_machinelearning_run_with_framework_pytorch_under_torchrun(tmp_path):
    store, profiles = str(tmp_path / "g.sqlite"), tmp_path / "profiles"
    out = tmp_path / "results"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(CHILD), store, str(profiles), str(out)], env=child_env(), cwd=tmp_path,
        timeout=500, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    # a file per rank (the ranks' stdout lines can interleave: see the child)
    results = [json.loads(p.read_text()) for p in sorted(out.glob("result-r*.json"))]
    assert sorted(r["rank"] for r in results) == [0, 1]
    for r in results:
        # as the SDK: before the process group, the first of NODE_RANK,
        # GROUP_RANK (torchrun's node rank: 0 on both), RANK...; after it, the rank
        assert r["before"]["ours"] == r["before"]["sdk"]
        assert r["after"]["ours"] == r["after"]["sdk"] == r["rank"] == r["index"]
    run = results[0]["run"]
    assert run == "torch-diag-w1" and results[1]["run"] == run
    events, _ = open_store(store).read(run)
    assert [Kind(e.kind).name for e in events].count("JOB_START") == 1  # rank 0 only
    meta = {}
    for e in events:
        if e.kind == Kind.METADATA:
            meta.update(e.extra)
    assert meta["software_configs"]["framework"] == "PYTORCH"
    assert meta["software_configs"]["framework_version"].startswith(
        __import__("torch").__version__.split("+")[0])
    assert meta["framework"] == "pytorch" and meta["num_processes"] == 2
    assert meta["hardware_configs"]["accelerator_type"] == "cpu"
    steps = [e.step for e in events if e.kind == Kind.STEP_START]
    assert steps == [0, 1, 2]
    traces = sorted(p.name for p in (profiles / "plugins" / "profile" / "s1").iterdir())
    assert [t.split(".p", 1)[1] for t in traces] == ["0.pt.trace.json", "1.pt.trace.json"]
