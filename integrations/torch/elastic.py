"""torchrun / TorchElastic: restarts are attempts of one run.

torchrun restarts the whole worker group when any worker fails (up to
``--max-restarts``): every worker is a new process that runs the script
from the top, with ``TORCHELASTIC_RESTART_COUNT`` one higher and the same
``TORCHELASTIC_RUN_ID`` (the ``--rdzv-id``; with ``--standalone`` a fresh
id per torchrun invocation). Recording into the same run name makes each
restart a new attempt of that run (its ``rec.job()`` records the job
start): the calculator then counts the restart as a disruption, the steps
redone after restoring the last checkpoint as wasted progress and the gap
as recovery (semantics rules 1-4). When one worker dies, torchrun stops the
others with SIGTERM: rank 0's adapter records that as a ``sigterm``
disruption, and the next attempt is the restart (counted once: rule 13).
"""

from __future__ import annotations

import os
from typing import Optional

from goodput_integrations.torch import _probe

__all__ = ["elastic_run_name", "is_rank_zero"]


def elastic_run_name(name: str, run_id: Optional[str] = None) -> str:
    """The run name every worker and every restart of a torchrun job shares.

    Args:
      name: the job's name.
      run_id: default ``TORCHELASTIC_RUN_ID`` (torchrun's ``--rdzv-id``);
        without one (not under torchrun, or a standalone id you do not want
        in the name) the name is ``name`` alone.

    Returns:
      ``"<name>-<run_id>"``, or ``name``.

    Example::

        rec = Recorder(gtorch.elastic_run_name("llama-8b"), store)
    """
    if not name or not isinstance(name, str):
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    run_id = run_id if run_id is not None else os.environ.get("TORCHELASTIC_RUN_ID")
    return f"{name}-{run_id}" if run_id else name


def is_rank_zero() -> bool:
    """Whether this process is rank 0 (or the only process): the default writer."""
    return _probe.process_index() == 0
