"""A complete PyTorch training loop instrumented for goodput (CPU; torchrun too).

    pip install torch 'goodput-core'
    python examples/torch_training_loop.py --store /tmp/goodput.sqlite --run-name my-run \\
        --ckpt-dir /tmp/my-run-ckpt
    torchrun --nproc-per-node 2 --max-restarts 1 examples/torch_training_loop.py \\
        --store /tmp/goodput.sqlite --run-name my-run --ckpt-dir /tmp/my-run-ckpt
    goodput report my-run --store /tmp/goodput.sqlite

(``examples/torch_training_loop.py`` runs this module; ``goodput demo --torch``
runs it under torchrun as ``-m goodput_integrations.demo.torch_train``.)

A small MLP on synthetic data, a real ``DataLoader`` with worker processes,
``torch.compile``, DistributedDataParallel over gloo under torchrun, and
``torch.distributed.checkpoint`` saves. Run it again (or let torchrun restart
it) and it resumes from its last checkpoint: ``start_step`` comes from the
restore, which happens *before* the step function is wrapped, so the
recorded step numbers continue where the checkpoint left off (a step
recorded twice is what the calculator counts as progress lost to a restart).

What each line records is said next to it. The options after ``--steps``
exist for the tests (tests/integrations/torch/) and the demo: ``--truth DIR``
writes the loop's own timing of every phase, ``--slow-rank`` makes one rank's
loader slower, ``--kill-at`` makes one rank kill itself with SIGKILL in the
first attempt, ``--protocol`` makes rank 0 (and the rank that kills itself)
report progress as the JAX demo's child does (:mod:`goodput_integrations.demo`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
import sys

from goodput_core import Recorder
from goodput_core.cli.demo_attempts import PROTOCOL_PREFIX


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--store", required=True, help="store URL or sqlite path")
    p.add_argument("--run-name", required=True,
                   help="run name (the same for every attempt; not --run, which torchrun takes)")
    p.add_argument("--ckpt-dir", required=True, help="DCP checkpoint directory")
    p.add_argument("--steps", type=int, default=60, help="train steps 0..N-1 in all")
    p.add_argument("--save-every", type=int, default=20)
    p.add_argument("--compile", default="inductor",
                   help="torch.compile backend ('none': eager)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    p.add_argument("--load-ms", type=float, default=20.0,
                   help="how long a worker takes to produce one batch")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--per-host", action="store_true", help="every rank writes (rule 13)")
    p.add_argument("--slow-rank", type=int, default=-1, help="this rank's loader is slower")
    p.add_argument("--slow-factor", type=float, default=3.0)
    p.add_argument("--kill-at", type=int, default=None,
                   help="first attempt only: --kill-rank kills itself after this step")
    p.add_argument("--kill-rank", type=int, default=1)
    p.add_argument("--recompile-at", type=int, default=None,
                   help="batches from this step on are smaller: torch.compile recompiles")
    p.add_argument("--truth", default=None, help="write the loop's own timing here (a dir)")
    p.add_argument("--protocol", action="store_true",
                   help="report progress on stdout (goodput demo --torch reads it)")
    return p.parse_args(argv)


class Batches:
    """A map-style dataset whose items are whole batches; batch k depends only
    on k (a resume replays it) and takes ``load_s`` to produce."""

    def __init__(self, n, load_s, features=64, batch_size=64, smaller_from=None):
        self.n, self.load_s, self.features, self.batch_size = n, load_s, features, batch_size
        self.smaller_from = n if smaller_from is None else smaller_from

    def __len__(self):
        return self.n

    def __getitem__(self, k):
        import torch

        time.sleep(self.load_s)  # reading and decoding, in a worker process
        g = torch.Generator().manual_seed(int(k))
        rows = self.batch_size if k < self.smaller_from else self.batch_size // 2
        x = torch.randn(rows, self.features, generator=g)
        return x, (x.sum(dim=1) > 0).long()


class Truth:
    """The loop's own timing of each phase (what the tests compare with): one
    JSON line per span, written as it ends (a killed process keeps its lines)."""

    def __init__(self, path):
        self.file = None if path is None else open(path, "a", buffering=1)

    def add(self, kind, t0, t1, **extra):
        if self.file is not None:
            self.file.write(json.dumps({"kind": kind, "t0": t0, "t1": t1, **extra}) + "\n")


def say(enabled, event, **fields):
    """One protocol line for ``goodput demo --torch`` (see goodput_integrations.demo)."""
    if enabled:
        # one write(2) of the whole line: two ranks share torchrun's stdout, and a
        # print() under PYTHONUNBUFFERED writes the text and its newline apart
        # (a rank's line could then land inside another's)
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), (PROTOCOL_PREFIX + json.dumps(
            {"event": event, **fields}) + "\n").encode())


def latest_checkpoint(ckpt_dir):
    """The highest step whose DCP checkpoint is complete (its .metadata written)."""
    steps = [int(d.split("-")[1]) for d in os.listdir(ckpt_dir) if d.startswith("step-")
             and os.path.exists(os.path.join(ckpt_dir, d, ".metadata"))] \
        if os.path.isdir(ckpt_dir) else []
    return max(steps, default=None)


def init_distributed(dist, rank, world, restart):
    """``init_process_group`` over gloo, its keys under this attempt's prefix.

    torchrun keeps its store across restarts (torch 2.13): with the default
    ``init_process_group("gloo")`` a restarted rank can read the address a
    rank of the previous attempt published, and the restart fails with
    ``Gloo connectFullMesh failed ... Connection refused`` (pytorch#167288).
    """
    from datetime import timedelta

    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=rank == 0 and not agent_store,
                          timeout=timedelta(minutes=5))
    dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt-{restart}", store),
                            rank=rank, world_size=world)


def main(argv=None):
    args = parse_args(argv)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    truth = Truth(None if args.truth is None else
                  os.path.join(args.truth, f"truth-r{rank}-a{restart}.jsonl"))
    rec = Recorder(args.run_name, args.store)
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.utils.data import DataLoader

    # lazy: after the job start: importing torch is the job's time
    from goodput_integrations import torch as gtorch

    # job start now; job end on success, a disruption on an exception. The
    # adapter: process-group and CUDA init, compiles, DCP calls, SIGTERM,
    # metadata; rank 0 writes (per_host: every rank, with its rank as index)
    job_t0 = time.time()
    with rec.job(), gtorch.instrumented(rec, per_host=args.per_host):
        talk = args.protocol and rank == 0
        say(talk, "attempt", attempt=rec.attempt, pid=os.getpid(), steps=args.steps,
            restart=restart)
        if world > 1:
            t0 = time.time()
            init_distributed(dist, rank, world, restart)  # accelerator init
            truth.add("init", t0, time.time())
        t_prep = time.time()
        with rec.training_preparation():  # model, optimizer, restore
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(64, args.hidden), torch.nn.ReLU(),
                                        torch.nn.Linear(args.hidden, args.hidden),
                                        torch.nn.ReLU(), torch.nn.Linear(args.hidden, 2))
            start_step = 0
            latest = latest_checkpoint(args.ckpt_dir)
            if latest is not None:
                state = {"model": model.state_dict()}
                t0 = time.time()
                dcp.load(state, checkpoint_id=os.path.join(args.ckpt_dir, f"step-{latest}"))
                truth.add("restore", t0, time.time())  # a checkpoint restore
                model.load_state_dict(state["model"])
                start_step = latest
                say(talk, "restored", step=latest)
            net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
            if args.compile != "none":
                net = torch.compile(net, backend=args.compile)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        truth.add("prep", t_prep, time.time())

        def step_fn(x, y):
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
            return loss

        slow = args.slow_factor if rank == args.slow_rank else 1.0
        data = Batches(args.steps, args.load_ms / 1000 * slow, batch_size=args.batch_size,
                       smaller_from=args.recompile_at)
        # every next() is a load; on the CPU the loop waits for all of it (an input stall)
        loader = gtorch.instrument_loader(DataLoader(
            data, batch_size=None, sampler=range(start_step, args.steps),
            num_workers=args.workers, prefetch_factor=2 if args.workers else None))
        # each call is the next step, numbered from the restored one; on the CPU
        # its end is its return (synchronous); on CUDA see docs/pytorch.md
        train_step = gtorch.train_step(step_fn, first_step=start_step)
        t0 = time.time()
        it, step = iter(loader), start_step  # starts the workers: a load too
        truth.add("load", t0, time.time())
        while step < args.steps:
            t0 = time.time()
            x, y = next(it)
            t1 = time.time()
            loss = train_step(x, y)
            t2 = time.time()
            truth.add("load", t0, t1)
            truth.add("step", t1, t2, step=step, frames=_frames())
            step += 1
            if talk:
                say(talk, "step", step=step - 1, loss=float(loss))
            if step % args.save_every == 0 or step == args.steps:
                t0 = time.time()
                # a DCP save (every rank writes its shards): checkpoint save time
                dcp.save({"model": model.state_dict()},
                         checkpoint_id=os.path.join(args.ckpt_dir, f"step-{step}"))
                truth.add("save", t0, time.time(), step=step)
            if (args.kill_at is not None and restart == 0 and rank == args.kill_rank
                    and step - 1 == args.kill_at):
                say(args.protocol, "crash", step=step - 1, rank=rank)
                os.kill(os.getpid(), signal.SIGKILL)  # a real crash: nothing more runs
        del it  # the workers stop
        if world > 1:
            dist.barrier()
            dist.destroy_process_group()
    truth.add("job", job_t0, time.time(), start_step=start_step)
    say(args.protocol and rank == 0, "done", step=args.steps, loss=float(loss))
    if rank == 0:
        print(f"steps {start_step}..{args.steps - 1} done", flush=True)


def _frames():
    """How many frames TorchDynamo compiled so far (its own counter)."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:
        return 0


if __name__ == "__main__":
    main()
