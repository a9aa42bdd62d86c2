"""``goodput serve`` attacked from outside, over raw loopback sockets and the
real command: request framing that would carry a request past the Host check
(a refused request's body, pipelining), malformed requests, methods it does
not serve, hostile addresses, a crowd of connections, clients that stall, and
where the token comes from. (The same desync in a real browser:
cli/test_serve_browser_attacks.py.)"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading

import pytest

from goodput_core.cli.serve.http import CSP
from goodput_core.stores import open_store
from tests.core.cli.test_serve_api import _simple
from tests.support.cli_process import _env
from tests.support.dashboard import (ServeProcess, answers, dashboard, exchange, get,
                                     get_json, wait_connections)

SECRET_RUN = "secret-run"
# A TLS 1.3 ClientHello's first bytes (a browser told https:// on the plain port)
CLIENT_HELLO = bytes.fromhex("160301020001000200fc0303") + bytes(32) + b"\x20" + bytes(32) + \
    bytes.fromhex("0020130113021303c02bc02fc02cc030cca9cca8c013c014009c009d002f0035")


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path}/goodput.sqlite"
    store = open_store(url)
    store.append(_simple(SECRET_RUN, group="g"))
    store.close()
    return url


def _host(port: int) -> bytes:
    return b"Host: 127.0.0.1:%d\r\n" % port


def _assert_security_headers(headers) -> None:
    assert headers.get("content-security-policy") == CSP
    assert headers.get("x-content-type-options") == "nosniff"


# ------------------------------------------------------------------ desync (S5)
def test_a_refused_requests_body_is_never_read_as_the_next_request(store_url):
    # A page on another site (DNS rebinding: its name resolves to 127.0.0.1) may
    # POST any body. Its body here is a whole request naming the dashboard: were it
    # parsed as the connection's next request, its answer (every run) would reach
    # the page as the answer to its next fetch.
    with dashboard(store_url) as srv:
        port = srv.server_port
        inner = b"GET /api/runs HTTP/1.1\r\n" + _host(port) + b"\r\n"
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(inner), inner)
        attacks = {
            "POST, Content-Length": b"POST /api/runs HTTP/1.1\r\nHost: evil.example:%d\r\n"
                                    b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
                                    % (port, len(inner), inner),
            "POST, chunked": b"POST /api/runs HTTP/1.1\r\nHost: evil.example:%d\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n%s" % (port, chunked),
            "GET with a body": b"GET /api/runs HTTP/1.1\r\nHost: evil.example:%d\r\n"
                               b"Content-Length: %d\r\n\r\n%s" % (port, len(inner), inner),
        }
        for name, data in attacks.items():
            raw = exchange(port, data)  # returns once the server closes the connection
            got = answers(raw)
            assert [a[0] for a in got] == [421], (name, raw[:500])
            assert SECRET_RUN.encode() not in raw, name
            _assert_security_headers(got[0][1])
        # a POST naming the server is refused too, and its body is no request either
        data = b"POST /api/runs HTTP/1.1\r\n" + _host(port) + \
            b"Content-Length: %d\r\n\r\n%s" % (len(inner), inner)
        got = answers(exchange(port, data))
        assert [a[0] for a in got] == [405] and got[0][1]["allow"] == "GET, HEAD"


def test_pipelined_requests_are_each_checked(store_url):
    with dashboard(store_url) as srv:
        port = srv.server_port
        good = b"GET /api/runs HTTP/1.1\r\n" + _host(port) + b"\r\n"
        foreign = b"GET /api/runs HTTP/1.1\r\nHost: evil.example\r\n\r\n"
        got = answers(exchange(port, good + foreign + good))
        # the second is refused, and the connection with it: the third is never answered
        assert [a[0] for a in got] == [200, 421]
        assert SECRET_RUN.encode() in got[0][2] and SECRET_RUN.encode() not in got[1][2]


def test_a_token_holds_whatever_the_framing(store_url):
    with dashboard(store_url, token="t0ken") as srv:
        port = srv.server_port
        inner = b"GET /api/runs HTTP/1.1\r\nHost: any\r\n\r\n"
        data = b"POST /api/runs HTTP/1.1\r\nHost: any\r\nContent-Length: %d\r\n\r\n%s" % (
            len(inner), inner)
        got = answers(exchange(port, data + inner))
        assert [a[0] for a in got] == [405]
        got = answers(exchange(port, inner + inner))
        assert [a[0] for a in got] == [401]


# ------------------------------------------------------------ malformed (S12)
def test_malformed_requests_get_a_4xx_with_the_headers_and_one_log_line(store_url):
    srv = ServeProcess(store_url)
    try:
        host = _host(srv.port)
        malformed = [
            b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n" + host + b"\r\n",  # one read
            b"GET / HTTP/9.9\r\n" + host + b"\r\n",
            CLIENT_HELLO,
            b"GET / HTTP/1.1 extra\r\n" + host + b"\r\n",
            b"GET / HTTP/1.1\r\n" + host + b"no colon here\r\n\r\n",
            b"GET /\x00 HTTP/1.1\r\n" + host + b"\r\n",
            b"GET / HTTP/1.1\r\n" + host + b"X-Big: " + b"b" * 20_000 + b"\r\n\r\n",
        ]
        for data in malformed:
            got = answers(exchange(srv.port, data))
            assert len(got) == 1 and 400 <= got[0][0] < 500, (data[:40], got)
            _assert_security_headers(got[0][1])
        # a request line over the limit sent in parts (h11's own bound)
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as conn:
            conn.sendall(b"GET /")
            for _ in range(9):
                conn.sendall(b"a" * 8192)
            raw = b""
            while chunk := conn.recv(65536):
                raw += chunk
        got = answers(raw)
        assert [a[0] for a in got] == [400]
        _assert_security_headers(got[0][1])
        # the server still answers
        assert get_json(srv.url + f"api/runs/{SECRET_RUN}/report")["goodput_percent"] == \
            pytest.approx(90.0)
    finally:
        err = srv.stop()
    assert srv.proc.returncode == 0, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    # one line each, naming the client; nothing for the good request
    assert len(lines) == len(malformed) + 1, err
    assert all(line.startswith("goodput serve: ") and "127.0.0.1" in line for line in lines)


def test_methods_it_does_not_serve_are_405_with_the_headers(store_url):
    with dashboard(store_url) as srv:
        for method in ("OPTIONS", "TRACE", "PROPFIND", "MKCOL", "POST", "PUT", "DELETE",
                       "PATCH"):
            status, headers, _ = get(srv.url + "api/runs", method=method)
            assert status == 405, method
            assert headers["Allow"] == "GET, HEAD"
            assert headers["Content-Security-Policy"] == CSP
            assert headers["X-Content-Type-Options"] == "nosniff"
        for target in (b"*", b"http://evil.example/api/runs", b"127.0.0.1:1"):
            data = b"OPTIONS %s HTTP/1.1\r\n%s\r\n" % (target, _host(srv.server_port))
            got = answers(exchange(srv.server_port, data))
            assert [a[0] for a in got] == [400], target
            _assert_security_headers(got[0][1])
        status, headers, _ = get(srv.url + "api/runs", method="HEAD")
        assert status == 200 and headers["Content-Security-Policy"] == CSP


def test_a_group_no_run_can_have_is_400(store_url):
    with dashboard(store_url) as srv:
        for group in ("x" * 300, "a%0Ab", "%20"):
            status, headers, body = get(srv.url + "api/compare?group=" + group)
            assert status == 400, (group, body)
            assert headers["Content-Security-Policy"] == CSP
        status, _, body = get(srv.url + "api/runs/secret-run/report?x=%FF")
        assert status == 400 and b"UTF-8" in body
        status, _, body = get(srv.url + "api/runs/%FF/report")
        assert status == 400 and b"UTF-8" in body


# ------------------------------------------------------------ addresses (S9)
def test_run_names_that_are_path_segments_have_addresses(tmp_path):
    url = f"sqlite:///{tmp_path}/dots.sqlite"
    store = open_store(url)
    names = {".": "~.", "..": "~..", "%": "%25", "~x": "~~x", "~.": "~~.", "a/b": "a%2Fb"}
    for name in names:
        store.append(_simple(name))
    store.close()
    with dashboard(url) as srv:
        for name, segment in names.items():
            report = get_json(srv.url + f"api/runs/{segment}/report")
            assert (report["run"], report["goodput_percent"]) == (name, pytest.approx(90.0))
            status, _, page = get(srv.url + f"run/{segment}")
            assert status == 200 and b'data-page="run"' in page
        # a name written without its "~" is the name after it
        assert get(srv.url + "api/runs/~secret/report")[0] == 404


# ------------------------------------------------------------ many connections
def test_a_crowd_of_connections_waits_in_the_queue_and_is_answered(store_url):
    # 200 clients connect at once, before the server accepts any (what a busy
    # moment looks like to the kernel): each is queued, none dropped, all answered
    from goodput_core.cli.serve import make_server

    server = make_server(open_store(store_url, create=False), "127.0.0.1", 0)
    conns, thread = [], None
    try:
        for _ in range(200):
            conn = socket.socket()
            conn.settimeout(10)  # a dropped connect would retry for ~30 s
            conn.connect(("127.0.0.1", server.server_port))
            conns.append(conn)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        request = b"GET /api/runs HTTP/1.1\r\n" + _host(server.server_port) + \
            b"Connection: close\r\n\r\n"
        for conn in conns:
            conn.settimeout(30)
            conn.sendall(request)
        for conn in conns:
            raw = b""
            while chunk := conn.recv(65536):
                raw += chunk
            assert [a[0] for a in answers(raw)] == [200]
    finally:
        for conn in conns:
            conn.close()
        if thread is not None:
            server.shutdown()
        server.server_close()


def test_a_client_that_stops_reading_is_let_go(tmp_path):
    # a client asks for many answers and reads none: once the server cannot
    # write for client_timeout, it drops the connection (and what it held)
    from goodput_core.cli.serve.http import DashboardServer

    url = f"sqlite:///{tmp_path}/s.sqlite"
    store = open_store(url)
    store.append(_simple("r"))
    store.close()
    n = 2000
    with dashboard(url, client_timeout=0.5) as srv:
        assert isinstance(srv, DashboardServer)
        conn = socket.socket()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn.connect(("127.0.0.1", srv.server_port))
        conn.setblocking(False)
        request = b"GET /static/app.js HTTP/1.1\r\n" + _host(srv.server_port) + b"\r\n"
        pending = request * n
        try:
            while pending:
                pending = pending[conn.send(pending):]
        except BlockingIOError:
            pass  # the server reads no further while it cannot write
        assert wait_connections(srv, 0, timeout=60), "the stalled client was kept"
        conn.setblocking(True)
        conn.settimeout(30)
        raw = b""
        try:
            while chunk := conn.recv(65536):
                raw += chunk
        except ConnectionResetError:
            pass
        conn.close()
        assert raw.count(b"HTTP/1.1 200 OK") < n
        assert get_json(srv.url + "api/runs/r/report")["goodput_percent"] == pytest.approx(90.0)


def test_connections_over_the_limit_are_closed_at_once(store_url):
    with dashboard(store_url, max_connections=3) as srv:
        held = [socket.create_connection(("127.0.0.1", srv.server_port), timeout=30)
                for _ in range(3)]
        try:
            assert wait_connections(srv, 3, timeout=30)
            with socket.create_connection(("127.0.0.1", srv.server_port), timeout=30) as extra:
                extra.sendall(b"GET /api/runs HTTP/1.1\r\n" + _host(srv.server_port) + b"\r\n")
                try:
                    assert extra.recv(1) == b""
                except ConnectionResetError:
                    pass
        finally:
            for conn in held:
                conn.close()
        assert wait_connections(srv, 0, timeout=30)
        assert get(srv.url + "api/runs")[0] == 200


# ------------------------------------------------------------ the token's source
def _status(url: str, token: str = "") -> int:
    return get(url + "api/runs", headers={"Authorization": f"Bearer {token}"} if token
               else {})[0]


def test_a_token_from_a_file_is_never_on_the_command_line(store_url, tmp_path):
    token = "f1le-t0ken-" + "x" * 20
    path = tmp_path / "token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    srv = ServeProcess(store_url, "--token-file", str(path))
    try:
        with open(f"/proc/{srv.proc.pid}/cmdline", "rb") as f:
            assert token.encode() not in f.read()
        assert _status(srv.url) == 401
        assert _status(srv.url, "wrong") == 401
        assert _status(srv.url, token) == 200
    finally:
        err = srv.stop()
    assert token not in err and "warning" not in err


def test_a_token_from_the_environment_and_a_warning_for_one_on_the_command_line(store_url):
    srv = ServeProcess(store_url, env={"GOODPUT_SERVE_TOKEN": "env-t0ken"})
    try:
        assert _status(srv.url) == 401 and _status(srv.url, "env-t0ken") == 200
    finally:
        err = srv.stop()
    assert "warning" not in err
    srv = ServeProcess(store_url, "--token", "argv-t0ken")
    try:
        assert _status(srv.url) == 401 and _status(srv.url, "argv-t0ken") == 200
    finally:
        err = srv.stop()
    assert "warning: a token given with --token can be read by every user" in err
    assert "argv-t0ken" not in err


def test_token_file_mistakes_are_one_line_errors(store_url, tmp_path):
    from tests.support.cli_process import goodput

    empty = tmp_path / "empty"
    empty.write_text("\n")
    loose = tmp_path / "loose"
    loose.write_text("t0ken\n")
    loose.chmod(0o644)
    for argv, message in (
            (["--token-file", str(tmp_path / "missing")], "cannot read the token file"),
            (["--token-file", str(empty)], "is empty"),
            (["--token-file", str(loose), "--token", "t"], "give the token once")):
        proc = goodput("serve", "--store", store_url, "--port", "0", *argv, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert stat.S_IMODE(os.stat(loose).st_mode) & 0o077
    srv = ServeProcess(store_url, "--token-file", str(loose))
    err = srv.stop()
    assert f"warning: {loose} can be read by other users" in err


# ------------------------------------------------------------ the extra
def test_without_the_serve_extra_the_command_says_what_to_install(store_url):
    # uvicorn made unimportable in the child, as where the extra is not installed
    code = (
        "import sys\n"
        "class NoUvicorn:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'uvicorn':\n"
        "            raise ImportError(\"No module named 'uvicorn'\")\n"
        "sys.meta_path.insert(0, NoUvicorn())\n"
        "from goodput_core.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, "-c", code, "serve", "--store", store_url,
                           "--port", "0"], capture_output=True, text=True, env=_env(),
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert "pip install 'goodput-core[serve]'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_importing_goodput_core_loads_no_web_server():
    code = ("import sys, goodput_core, goodput_core.cli.serve, goodput_core.cli.serve.api; "
            "print(sorted(m for m in ('uvicorn', 'h11') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
