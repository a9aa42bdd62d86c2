"""A fresh process for the JAX adapter tests (run as a script, not collected).

Usage: python jax_child.py SCENARIO EVENTS_FILE

Events go through a duck-typed ``cloud_logger`` that appends one JSON line
per payload synchronously, so they survive the process dying from a signal.
"""

from __future__ import annotations

import json
import os
import signal
import sys


class JsonLinesLogger:
    """The reference's cloud_logger contract, writing to a local file."""

    def __init__(self, path):
        self.path = path

    def write_cloud_logging_entry(self, payload):
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(payload) + "\n")
            f.flush()

    def flush(self):
        pass


def main(scenario: str, path: str) -> None:
    from goodput_core import Recorder

    rec = Recorder("child", cloud_logger=JsonLinesLogger(path), strict=True)

    if scenario == "sigterm_chained":
        def previous(signum, frame):
            with open(path + ".prev", "w") as f:
                f.write(f"previous handler called with {signum}")
            sys.exit(7)

        signal.signal(signal.SIGTERM, previous)

    import jax  # noqa: F401  (import does not initialise backends)
    import goodput_integrations.jax as gjax
    from goodput_integrations.jax import _probe

    adapter = gjax.instrument(rec)
    state = {"after_instrument": _probe.backends_initialized(),
             "decision": adapter.gate.decision}

    if scenario == "lazy_init":
        import jax.numpy as jnp

        jax.devices()  # the first backend init happens here, timed
        (jnp.ones(3) * 2).block_until_ready()
        state["after_devices"] = _probe.backends_initialized()
        state["decision_after"] = adapter.gate.decision
        state["missed"] = adapter.accelerator_init_missed
        gjax.uninstrument()
        with open(path + ".state", "w") as f:
            json.dump(state, f)
        return
    jax.devices()
    if scenario in ("sigterm_chained", "sigterm_default"):
        os.kill(os.getpid(), signal.SIGTERM)
        # SIGTERM is handled between bytecodes: give it one to land on.
        for _ in range(1000):
            pass
        print("still alive after SIGTERM", flush=True)
        sys.exit(3)
    if scenario == "exception":
        raise ValueError("boom in training")
    if scenario == "exception_recorded_by_job":
        with rec.job():
            try:
                raise KeyError("k")
            except KeyError as exc:
                setattr(exc, gjax.DISRUPTION_RECORDED_ATTR, True)
                raise
    if scenario == "exception_after_job_end":
        with rec.job():
            with rec.step(0):
                pass
        raise ValueError("uploading the final artifacts failed")
    if scenario in ("clean_inside_except", "crash_inside_except"):
        # the whole job runs while an unrelated exception is being handled
        try:
            raise FileNotFoundError("config.yaml")
        except FileNotFoundError:
            with rec.job():
                with rec.step(0):
                    if scenario == "crash_inside_except":
                        raise ValueError("boom in training")
        return
    raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
