"""``goodput serve``'s JSON API and security rules, over real HTTP on loopback
and a real SQLite store (the browser tests are in cli/test_serve_browser.py)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pytest

from goodput_core.events import EventRecord, Kind
from goodput_core.queries.calculator import Calculator
from goodput_core.cli.serve.http import CSP, is_loopback
from goodput_core.cli.serve.runs import RunCache, run_state, STOPPED_AFTER_SECONDS
from goodput_core.cli.serve.views import SpanIndex, timeline_bins
from goodput_core.stores import open_store
from tests.support.cli_process import goodput, synthetic_job_events
from tests.support.dashboard import HOSTILE_RUN, dashboard, get, get_json, run_path

T0 = 1_700_000_000.0


def _simple(run: str = "simple", group: str = ""):
    """A 100 s run: TPU init 0-10 s, nine 10 s steps 10-100 s, job end at 100 s
    (by hand: 90 s productive of 100 s total, 90 %)."""
    def e(kind, t, step=None, **x):
        return EventRecord(run, int(kind), T0 + t, step, x or None)
    evs = [e(Kind.JOB_START, 0), e(Kind.TPU_INIT_START, 0), e(Kind.TPU_INIT_END, 10)]
    evs += [e(Kind.STEP_START, 10 + 10 * i, i) for i in range(9)]
    evs += [e(Kind.STEP_END, 100, 8), e(Kind.JOB_END, 100)]
    if group:
        evs.append(e(Kind.METADATA, 0, run_group=group))
    return evs


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path}/goodput.sqlite"
    store = open_store(url)
    store.append(_simple())
    store.append(synthetic_job_events("synthetic"))
    store.close()
    return url


def test_report_endpoint_is_exactly_the_report_command(store_url):
    with dashboard(store_url) as srv:
        served = get_json(srv.url + "api/runs/synthetic/report")
    cli = goodput("report", "synthetic", "--store", store_url, "--json")
    assert cli.returncode == 0, cli.stderr
    printed = json.loads(cli.stdout)
    # the query time is when each was asked; the run has ended, so nothing else moves
    served.pop("query_time"), printed.pop("query_time")
    assert served == printed


def test_timeline_is_merged_to_the_width_asked(store_url):
    with dashboard(store_url) as srv:
        base = srv.url + "api/runs/simple/timeline"
        wide = get_json(base + "?width=10")
        narrow = get_json(base + "?width=4")
        zoomed = get_json(base + f"?width=2&start={T0 + 5}&end={T0 + 15}")
    labels = wide["labels"]
    # 10 px of 10 s: the first is TPU init, the nine others productive -> two spans, pure
    assert [(a - T0, b - T0, labels[k], share) for a, b, k, share in wide["spans"]] == \
        [(0.0, 10.0, "TPU_INITIALIZATION", 1.0), (10.0, 100.0, "PRODUCTIVE", 1.0)]
    # 4 px of 25 s: the first holds 10 s TPU init and 15 s steps -> all productive,
    # one span holding 90 of its 100 s productive
    [(a, b, k, share)] = narrow["spans"]
    assert (a - T0, b - T0, narrow["labels"][k]) == (0.0, 100.0, "PRODUCTIVE")
    assert share == pytest.approx(0.9)
    # zoomed on 5-15 s: 5 s of each
    assert [(a - T0, b - T0, zoomed["labels"][k]) for a, b, k, _ in zoomed["spans"]] == \
        [(5.0, 10.0, "TPU_INITIALIZATION"), (10.0, 15.0, "PRODUCTIVE")]


def test_timeline_of_many_spans_never_returns_more_than_the_width():
    # 10,000 alternating 1 s spans; one request of 50 px: at most 50 spans, and
    # the pixels still add up to the whole: each 200 s pixel is half and half
    starts = T0 + 2 * __import__("numpy").arange(10_000.0)
    arrays = {"PRODUCTIVE": (starts, starts + 1), "DATA_LOADING_SYNC": (starts + 1, starts + 2)}
    index = SpanIndex(arrays, (T0, T0 + 20_000))
    out = timeline_bins(index, None, None, 50, {"disruption": starts})
    assert len(out["spans"]) <= 50
    assert all(share == pytest.approx(0.5) for *_, share in out["spans"])
    assert len(out["markers"]["disruption"]) <= 50
    assert out["spans"][0][0] == T0 and out["spans"][-1][1] == T0 + 20_000


def test_series_points_are_the_calculators_windows(store_url):
    with dashboard(store_url) as srv:
        cum = get_json(srv.url + "api/runs/simple/series?points=4")
        rolling = get_json(srv.url + "api/runs/simple/series?points=4&window=25")
    # points at 25, 50, 75, 100 s. Cumulative: 15/25, 40/50, 65/75, 90/100 productive
    assert [t - T0 for t in cum["times"]] == [25.0, 50.0, 75.0, 100.0]
    assert cum["goodput_percent"] == pytest.approx([60.0, 80.0, 100 * 65 / 75, 90.0])
    assert cum["badput_percent"]["TPU_INITIALIZATION"] == pytest.approx(
        [40.0, 20.0, 100 * 10 / 75, 10.0])
    # rolling 25 s: [0, 25] holds the 10 s init; later windows are all steps
    assert rolling["goodput_percent"] == pytest.approx([60.0, 100.0, 100.0, 100.0])
    assert cum["state"] == "ended" and cum["state_since"] == T0 + 100
    # every step spans 10 s (which steps count is rule 12's: the report's steps_measured)
    steps = cum["steps"]
    assert steps["mean_seconds"] == pytest.approx([10.0] * len(steps["steps"]))
    assert steps["max_seconds"] == pytest.approx([10.0] * len(steps["steps"]))
    assert len(steps["steps"]) >= 8 and steps["ideal_seconds"] == pytest.approx(10.0)


def test_runs_are_listed_newest_first_and_filtered_by_group(tmp_path):
    url = f"sqlite:///{tmp_path}/g.sqlite"
    store = open_store(url)
    old = _simple("old", group="sweep")
    new = [EventRecord("new", r.kind, r.time + 1000, r.step, r.extra) for r in _simple("new")]
    store.append(old)
    store.append(new)
    store.close()
    with dashboard(url) as srv:
        every = get_json(srv.url + "api/runs")
        sweep = get_json(srv.url + "api/runs?group=sweep")
        compare = get_json(srv.url + "api/compare?group=sweep")
    assert [r["run"] for r in every["runs"]] == ["new", "old"]
    assert [(r["run"], r["group"], r["state"]) for r in sweep["runs"]] == [("old", "sweep", "ended")]
    assert sweep["runs"][0]["goodput_percent"] == pytest.approx(90.0)
    assert [r["run"] for r in compare["runs"]] == ["old"]


class _NoEngineState(Calculator):
    """A calculator of an engine that does not tell a run's state itself."""

    state = None


def test_run_state_without_the_engines_running_stopped_ended():
    evs = _simple("r")
    calc = _NoEngineState("r")
    calc.add([e for e in evs if e.time <= T0 + 20])  # running: steps still coming
    assert run_state(calc, T0 + 20) == ("running", T0)
    # no sign of life for three heartbeat intervals
    assert run_state(calc, T0 + 20 + STOPPED_AFTER_SECONDS + 1) == ("stopped", T0 + 20)
    # a recorded crash stops the attempt at once
    calc.add([EventRecord("r", int(Kind.DISRUPTION), T0 + 21, None,
                          {"disruption_cause": "crash"})])
    assert run_state(calc, T0 + 22) == ("stopped", T0 + 21)
    calc.add([e for e in evs if e.time > T0 + 20])
    assert run_state(calc, T0 + 500) == ("ended", T0 + 100)
    assert run_state(_NoEngineState("nothing"), T0) == ("not started", None)


def test_run_state_is_the_engines_where_it_tells_it():
    from goodput_core.timeline.liveness import RunState

    class Told(Calculator):
        def state(self, now=None):
            return RunState(state="stopped", stopped_at=T0 + 7, cause="crash")

    calc = Told("r")
    calc.add(_simple("r")[:3])
    assert run_state(calc, T0 + 20) == ("stopped", T0 + 7)


def test_unknown_run_and_bad_parameters_are_clear_errors(store_url):
    with dashboard(store_url) as srv:
        status, _, body = get(srv.url + "api/runs/nope/report")
        assert status == 404 and b"no run named" in body
        status, _, body = get(srv.url + "api/runs/simple/timeline?width=abc")
        assert status == 400 and b"width" in body
        status, _, body = get(srv.url + "api/runs/simple/timeline?start=5&end=1")
        assert status == 400


# ------------------------------------------------------------------ security
def test_every_answer_is_read_only_with_a_csp(store_url):
    with dashboard(store_url) as srv:
        for path in ("", "run/simple", "compare?group=x", "static/app.js", "api/runs",
                     "api/runs/simple/report", "api/runs/nope/report"):
            status, headers, _ = get(srv.url + path)
            assert headers["Content-Security-Policy"] == CSP, path
            assert headers["X-Content-Type-Options"] == "nosniff"
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            status, headers, _ = get(srv.url + "api/runs", method=method)
            assert status == 405 and headers["Allow"] == "GET, HEAD"
            assert headers["Content-Security-Policy"] == CSP
    assert "script-src 'self'" in CSP and "'unsafe-inline'" not in CSP


def test_assets_reference_nothing_outside_the_server():
    from importlib import resources

    static = resources.files("goodput_core.cli.serve").joinpath("static")
    for asset in static.iterdir():
        text = asset.read_text()
        # the SVG namespace is a name, never fetched; any other absolute URL would be
        urls = set(re.findall(r"(?:https?:)?//[\w.-]+\.\w+[^\s\"')]*", text)) - {
            "http://www.w3.org/2000/svg"}
        assert not {u for u in urls if not u.startswith("//")}, (asset.name, urls)
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text, asset.name
        assert "document.write" not in text


def test_a_foreign_host_header_is_refused(store_url):
    # DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends its own Host
    with dashboard(store_url) as srv:
        status, _, _ = get(srv.url + "api/runs", headers={"Host": "evil.example:80"})
        assert status == 421
        status, _, _ = get(srv.url + "api/runs", headers={"Host": f"localhost:{srv.server_port}"})
        assert status == 200
    # with a token, the token guards: remote users may name the machine as they like
    with dashboard(store_url, token="t") as srv:
        status, _, _ = get(srv.url + "api/runs", headers={"Host": "gpu-box.example:8765",
                                                          "Authorization": "Bearer t"})
        assert status == 200


def test_ipv6_loopback_is_loopback_and_binds(store_url):
    from goodput_core.cli.serve import make_server

    assert is_loopback("::1") and is_loopback("[::1]") and is_loopback("127.0.0.2")
    try:
        server = make_server(open_store(store_url, create=False), "::1", 0)
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    server.server_close()
    assert server.url.startswith("http://[::1]:")


def test_a_token_is_required_on_every_request_when_given(store_url):
    with dashboard(store_url, token="s3cr3t; t0ken=é") as srv:  # cookie syntax in it too
        status, headers, _ = get(srv.url + "?token=" + run_path("s3cr3t; t0ken=é"))
        assert status == 200
        cookie = headers["Set-Cookie"].split(";")[0]
        assert get(srv.url + "api/runs", headers={"Cookie": cookie})[0] == 200
        assert get(srv.url + "api/runs", headers={"Cookie": "goodput_token=s3cr3t"})[0] == 401
    with dashboard(store_url, token="s3cr3t-t0ken") as srv:
        assert get(srv.url + "api/runs")[0] == 401
        assert get(srv.url + "api/runs?token=wrong")[0] == 401
        assert get(srv.url + "api/runs", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert get(srv.url + "api/runs", headers={"Authorization": "Bearer s3cr3t-t0ken"})[0] == 200
        status, headers, _ = get(srv.url + "?token=s3cr3t-t0ken")
        assert status == 200
        cookie = headers["Set-Cookie"].split(";")[0]
        assert "HttpOnly" in headers["Set-Cookie"] and "SameSite=Strict" in headers["Set-Cookie"]
        assert get(srv.url + "api/runs", headers={"Cookie": cookie})[0] == 200


def _non_loopback_address():
    """An address of this machine that is not loopback, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: picks the outgoing address
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if is_loopback(addr) else addr


def test_a_non_loopback_bind_without_a_token_is_refused(store_url, tmp_path):
    for host in ("0.0.0.0", "::", "192.0.2.10"):
        assert not is_loopback(host)
        with pytest.raises(ValueError, match="token"):
            from goodput_core.cli.serve import make_server
            make_server(open_store(store_url, create=False), host, 0, None)
    env = {k: v for k, v in os.environ.items() if k != "GOODPUT_SERVE_TOKEN"}
    proc = subprocess.run([sys.executable, "-m", "goodput_core.cli", "serve", "--store", store_url,
                           "--host", "0.0.0.0", "--port", "0"], capture_output=True, text=True,
                          env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert "goodput serve: error: refusing to serve on 0.0.0.0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_non_loopback_bind_with_a_token_serves_with_the_token():
    addr = _non_loopback_address()
    if addr is None:
        pytest.skip("this machine has no non-loopback address")
    from goodput_core.cli.serve import make_server
    from goodput_core.stores.memory import MemoryStore

    server = make_server(MemoryStore("nl"), addr, 0, "tok")
    try:
        assert server.server_address[0] == addr
    finally:
        server.server_close()


def test_hostile_run_names_travel_as_data(tmp_path):
    url = f"sqlite:///{tmp_path}/h.sqlite"
    store = open_store(url)
    store.append(_simple(HOSTILE_RUN))
    store.close()
    with dashboard(url) as srv:
        runs = get_json(srv.url + "api/runs")
        report = get_json(srv.url + f"api/runs/{run_path(HOSTILE_RUN)}/report")
        status, headers, page = get(srv.url + f"run/{run_path(HOSTILE_RUN)}")
    assert [r["run"] for r in runs["runs"]] == [HOSTILE_RUN]
    assert report["run"] == HOSTILE_RUN and report["goodput_percent"] == pytest.approx(90.0)
    # the page is the same static file for every run: the name is never in the markup
    assert status == 200 and b"alert(1)" not in page


def test_the_live_stream_says_change_when_another_process_appends(tmp_path):
    url = f"sqlite:///{tmp_path}/live.sqlite"
    store = open_store(url)
    evs = _simple("live")
    store.append(evs[:5])
    store.close()
    with dashboard(url, min_interval=0.0) as srv:
        import urllib.request
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(srv.url + "api/stream?run=live", timeout=30) as stream:
            assert stream.headers["Content-Type"] == "text/event-stream"
            assert stream.readline() == b"retry: 1000\n"
            # a separate writer process (a training job's) appends the rest
            code = ("import sys, pickle; from goodput_core.stores import open_store; "
                    "s = open_store(sys.argv[1]); s.append(pickle.loads(sys.stdin.buffer.read())); "
                    "s.close()")
            import pickle
            subprocess.run([sys.executable, "-c", code, url], input=pickle.dumps(evs[5:]),
                           check=True, timeout=60)
            lines = [stream.readline() for _ in range(3)]  # blocks until the change (timeout 30 s)
        assert b"event: change\n" in lines
        report = get_json(srv.url + "api/runs/live/report")
        assert report["goodput_percent"] == pytest.approx(90.0)


def test_compare_endpoint_is_exactly_the_compare_command(tmp_path):
    url = f"sqlite:///{tmp_path}/c.sqlite"
    store = open_store(url)
    store.append(_simple("a", group="sweep"))
    store.append(_simple("b", group="sweep"))
    store.close()
    with dashboard(url) as srv:
        served = get_json(srv.url + "api/compare?group=sweep")
    cli = goodput("compare", "--group", "sweep", "--store", url, "--json")
    assert cli.returncode == 0, cli.stderr
    printed = json.loads(cli.stdout)
    for cmp in (served, printed):
        for rep in cmp["runs"]:
            rep.pop("query_time")
    assert served == printed


def test_a_big_store_lists_in_parts_within_the_budget(tmp_path):
    from goodput_core.cli.serve.api import Api

    url = f"sqlite:///{tmp_path}/big.sqlite"
    store = open_store(url)
    for i in range(3):
        store.append(_simple(f"r{i}"))
    store.close()
    cache = RunCache(open_store(url, create=False))
    # no time to read any run: every row comes back pending, none is dropped
    first = Api(cache, budget_s=-1.0).runs({})
    assert first["pending"] == 3 and sorted(r["run"] for r in first["runs"]) == ["r0", "r1", "r2"]
    assert all(r["pending"] and r["goodput_percent"] is None for r in first["runs"])
    later = Api(cache, budget_s=60.0).runs({})
    assert later["pending"] == 0
    assert [r["goodput_percent"] for r in later["runs"]] == pytest.approx([90.0] * 3)


def test_live_streams_are_bounded_and_a_stuck_client_blocks_no_one(store_url):
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with dashboard(store_url, max_streams=2) as srv:
        # two clients open streams and never read them again
        held = [opener.open(srv.url + "api/stream?run=simple", timeout=30) for _ in range(2)]
        try:
            status, _, body = get(srv.url + "api/stream?run=simple")
            assert status == 503 and b"too many live streams" in body
            assert get_json(srv.url + "api/runs/simple/report")["goodput_percent"] == \
                pytest.approx(90.0)
        finally:
            for stream in held:
                stream.close()


def test_cloud_logging_is_read_less_often():
    from types import SimpleNamespace

    from goodput_core.cli.serve import make_server

    for url, interval, names_age in (("cloud-logging://proj/log", 2.0, 10.0),
                                     ("memory://x", 0.5, 1.0)):
        server = make_server(SimpleNamespace(url=url), "127.0.0.1", 0)
        try:
            cache = server.api.cache
            assert (cache._min_interval, cache._names_max_age) == (interval, names_age)
        finally:
            server.server_close()


def test_bad_ports_are_one_line_errors(store_url):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        for port, message in (("99999", "is not a port (0-65535)"), ("-1", "is not a port"),
                              (str(taken.getsockname()[1]), "cannot listen on 127.0.0.1:")):
            proc = goodput("serve", "--store", store_url, "--port", port, timeout=60)
            assert proc.returncode == 2, (port, proc.stderr)
            assert message in proc.stderr and "Traceback" not in proc.stderr
            assert len(proc.stderr.strip().splitlines()) == 1
    finally:
        taken.close()


def test_the_runs_page_stream_follows_a_running_run(tmp_path):
    import time
    import urllib.request

    # a run that is running now (its events are seconds old), and an old, ended one
    now = time.time()
    running = [EventRecord("now", r.kind, r.time - T0 + now - 60, r.step, r.extra)
               for r in _simple("now") if r.time - T0 <= 50]
    url = f"sqlite:///{tmp_path}/runs-live.sqlite"
    store = open_store(url)
    store.append(_simple("old"))
    store.append(running)
    store.close()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with dashboard(url, min_interval=0.0) as srv:
        rows = {r["run"]: r for r in get_json(srv.url + "api/runs")["runs"]}
        assert (rows["now"]["state"], rows["old"]["state"]) == ("running", "ended")
        with opener.open(srv.url + "api/stream", timeout=30) as stream:
            assert stream.readline() == b"retry: 1000\n"
            code = ("import sys, pickle; from goodput_core.stores import open_store; "
                    "s = open_store(sys.argv[1]); s.append(pickle.loads(sys.stdin.buffer.read())); "
                    "s.close()")
            step = EventRecord("now", int(Kind.STEP_START), now - 5, 5, None)
            import pickle
            subprocess.run([sys.executable, "-c", code, url], input=pickle.dumps([step]),
                           check=True, timeout=60)
            lines = [stream.readline() for _ in range(3)]  # blocks until the change
        assert b"event: change\n" in lines


def test_a_client_that_sends_nothing_is_let_go(store_url):
    # client_timeout: the test's patience (60 s by default)
    with dashboard(store_url, client_timeout=0.5) as srv:
        with socket.create_connection(("127.0.0.1", srv.server_port), timeout=30) as idle:
            assert idle.recv(1) == b""  # connected, never a byte sent: the server closes it
        with socket.create_connection(("127.0.0.1", srv.server_port), timeout=30) as idle:
            idle.sendall(b"GET /api/runs HTTP/1.1\r\n")  # and never the rest
            assert idle.recv(1) == b""  # the server closes it
        assert get_json(srv.url + "api/runs/simple/report")["goodput_percent"] == \
            pytest.approx(90.0)
