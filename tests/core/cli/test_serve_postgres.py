"""``goodput serve`` over a real PostgreSQL store (a throwaway server on loopback):
the same API answers as over the embedded store, and a writer in another process
is followed live."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest

from goodput_core.stores import open_store
from tests.core.cli.test_serve_api import _simple
from tests.support.cli_process import goodput, synthetic_job_events
from tests.support.dashboard import dashboard, get, get_json
from tests.support.postgres_server import PASSWORD, skip_without_postgres

skip_without_postgres()


def test_the_dashboard_over_postgresql(postgres_url):
    store = open_store(postgres_url)
    store.append(synthetic_job_events("synthetic"))
    evs = _simple("live")
    store.append(evs[:6])
    store.close()
    with dashboard(postgres_url, min_interval=0.0) as srv:
        runs = get_json(srv.url + "api/runs")
        assert {r["run"]: r["state"] for r in runs["runs"]}["synthetic"] == "ended"
        served = get_json(srv.url + "api/runs/synthetic/report")
        before = get_json(srv.url + "api/runs/live/report")
        # another process appends the rest of the live run
        code = ("import sys, pickle; from goodput_core.stores import open_store; "
                "s = open_store(sys.argv[1]); s.append(pickle.loads(sys.stdin.buffer.read())); "
                "s.close()")
        subprocess.run([sys.executable, "-c", code, postgres_url], input=pickle.dumps(evs[6:]),
                       check=True, timeout=60)
        after = get_json(srv.url + "api/runs/live/report")
    cli = goodput("report", "synthetic", "--store", postgres_url, "--json")
    assert cli.returncode == 0, cli.stderr
    printed = json.loads(cli.stdout)
    # the store's address is shown without its password
    assert PASSWORD not in json.dumps(runs) + json.dumps(served)
    served.pop("query_time"), printed.pop("query_time")
    assert served == printed
    assert before["last_step"] == 2 and after["last_step"] == 8
    assert after["goodput_percent"] == pytest.approx(90.0)  # by hand: 90 of 100 s


def test_a_run_name_no_store_can_hold_is_not_found(postgres_url):
    # PostgreSQL text cannot hold a NUL: such a name is never sent to the server
    store = open_store(postgres_url)
    store.append(_simple("r"))
    store.close()
    with dashboard(postgres_url) as srv:
        for path in ("api/runs/a%00b/report", "api/runs/a%00b/timeline", "api/stream?run=a%00b"):
            status, _, body = get(srv.url + path)
            assert status == 404 and b"no run named" in body, (path, body)
        assert get_json(srv.url + "api/runs/r/report")["goodput_percent"] == pytest.approx(90.0)
