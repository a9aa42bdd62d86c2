"""One job recorded and queried with *naive* datetimes; prints the numbers as JSON.

``tests/core/test_time_zones.py`` runs this module in subprocesses under
several ``TZ`` values: a naive datetime is local time everywhere (recorder,
calculator queries, exclusions, the CLI's ``--window``), so every number
printed must be the same whatever the zone. User code writes times the way
the reference's README does, ``datetime.now()`` at that instant, which is
``datetime.fromtimestamp(t)`` (naive, local).

The job (seconds after ``T0``): TPU init [0, 10), training prep [10, 20), a
blocking data load [20, 25), steps 0..9 starting every 10 s from 25, an
"eval" custom badput event [80, 84) inside step 5, job end at 125.

Usage: ``python -m tests.support.tz_job DIR`` (DIR: where the SQLite store goes).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import logging
import os
import sys

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
RUN = "tz-run"
QUERY = T0 + 200.0


def local(seconds_after_t0: float) -> dt.datetime:
    """What ``datetime.now()`` returns at ``T0 + seconds_after_t0`` here."""
    return dt.datetime.fromtimestamp(T0 + seconds_after_t0)


def play(rec, clock) -> None:
    """Records the job through the reference's method names, naive datetimes only."""

    def at(x):
        if clock is not None:
            clock.t = T0 + x
        return local(x)

    rec.record_job_start_time(at(0))
    rec.record_tpu_init_start_time(at(0))
    rec.record_tpu_init_end_time(at(10))
    rec.record_training_preparation_start_time(at(10))
    rec.record_training_preparation_end_time(at(20))
    rec.record_data_loading_start_time(at(20))
    rec.record_data_loading_end_time(at(25))
    for step in range(10):
        rec.record_step_start_time(step, at(25 + 10 * step))
        if step == 5:
            rec.record_custom_badput_event_start_time(at(80), "eval")
            rec.record_custom_badput_event_end_time(at(84), "eval")
    rec.record_job_end_time(at(125))


def ours(directory: str) -> dict:
    from goodput_core import Calculator
    from goodput_core.cli import main
    from goodput_core.compat import goodput as compat
    from tests.support.fake_clock import FakeClock

    url = "sqlite:///" + os.path.join(directory, "tz.sqlite")
    clock = FakeClock(T0)
    rec = compat.GoodputRecorder(RUN, "log", True, store=url, clock=clock, strict=True)
    play(rec, clock)
    assert rec.flush(10)

    calc = Calculator(RUN, url)
    calc.refresh()
    whole = calc.cumulative(now=local(200))
    window = calc.window(local(30), local(90), now=local(200))
    excluded = calc.cumulative(now=local(200), exclude=[(local(40), local(50))])

    compat_calc = compat.GoodputCalculator(RUN, "log", store=url, clock=lambda: QUERY)
    c_goodput, _, c_step = compat_calc.get_job_goodput(True)
    c_interval = compat_calc.get_job_goodput_interval(local(30), local(90))
    c_excl = compat_calc.get_job_goodput_with_exclusions([(local(40), local(50))])

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["report", RUN, "--store", url, "--json",
                     "--window", f"{local(30).isoformat()}/{local(90).isoformat()}",
                     "--exclude", f"{local(40).isoformat()}/{local(50).isoformat()}"])
    cli = json.loads(out.getvalue())
    return {
        "cumulative": [whole.goodput, whole.total_seconds, whole.productive_seconds,
                       whole.max_productive_step],
        "window": [window.goodput, window.total_seconds],
        "exclusion": [excluded.goodput, excluded.total_seconds, excluded.excluded_seconds],
        "compat": [c_goodput, c_step, c_interval[0], c_interval[3], c_excl[0], c_excl[3]],
        "cli": [code, cli["goodput_percent"], cli["total_seconds"], cli["excluded_seconds"]],
    }


def reference() -> dict:
    """The installed ml-goodput-measurement, recording and computing the same job."""
    from ml_goodput_measurement.src import goodput as ref

    from tests.support.reference_harness import FakeCloudLogger, frozen_reference_clock

    log = FakeCloudLogger(RUN, clock=lambda: QUERY)
    play(ref.GoodputRecorder(RUN, "log", True, log), None)
    with frozen_reference_clock(QUERY):
        import tempfile

        with tempfile.TemporaryDirectory() as cache:
            calc = ref.GoodputCalculator(RUN, "log", cloud_logger=log, cache_dir=cache)
            goodput, _, step = calc.get_job_goodput(True)
            total = calc.get_job_goodput_details()["total_elapsed_time"]
    return {"cumulative": [goodput, total, step]}


def utcnow_warning() -> list:
    """Warnings of a recorder (real clock) given ``datetime.utcnow()``-like naive UTC."""
    from goodput_core import Recorder

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("goodput").addHandler(handler)
    rec = Recorder("utcnow", "memory://tz-utcnow")
    naive_utc = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    rec.record_job_start_time(naive_utc)
    rec.record_step_start_time(0, naive_utc)
    rec.close()
    return [r.getMessage() for r in records if "time-zone offset" in r.getMessage()]


if __name__ == "__main__":
    json.dump({"ours": ours(sys.argv[1]), "reference": reference(),
               "utcnow_warnings": utcnow_warning(),
               "utc_offset_hours": dt.datetime.now().astimezone().utcoffset().total_seconds()
               / 3600}, sys.stdout)
