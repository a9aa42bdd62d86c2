"""No command prints a secret (issue 43: P5, P6, O3, O4).

Every command that takes a store or an endpoint (found from the parser:
tests/support/every_command.py) runs in a real subprocess against a real
PostgreSQL server that requires a password, given as a URL and as a libpq
keyword DSN, with the right password and a wrong one; and every command that
takes an OTLP endpoint runs with a password in the endpoint and a malformed
``OTEL_EXPORTER_OTLP_HEADERS`` holding a token, through the real OpenTelemetry
SDK (which warns about the header). The secret never appears in stdout,
stderr, or any file written (outputs, spill files, data and cache dirs).
"""

import os
import socket

import pytest

from tests.support import every_command as ec
from tests.support.postgres_server import PASSWORD, USER, skip_without_postgres

skip_without_postgres()

WRONG = "wr0ng-Secret-pw"


def test_every_store_and_endpoint_command_is_attacked():
    # a new command that takes a store or an endpoint must be added to the tables
    assert ec.store_commands() == set(ec.INVOCATIONS)
    assert ec.endpoint_commands() == set(ec.ENDPOINT_INVOCATIONS)


def _assert_hidden(results, secrets, tmp):
    for argv, code, out, err in results:
        for secret in secrets:
            assert secret not in out and secret not in err, (argv, code, out, err)
        assert "Traceback" not in err, (argv, err)
    for path in ec.files_under(str(tmp)):
        with open(path, "rb") as f:
            data = f.read()
        for secret in secrets:
            assert secret.encode() not in data and secret not in path, path


def _dsn(server, db, password):
    return (f"host=127.0.0.1 port={server.port} user={USER} password={password} "
            f"dbname={db}")


@pytest.fixture(scope="module", params=["url", "keywords"])
def addresses(request, postgres_server):
    """{password: store address} of one database holding run ``r``, in one form
    (a URL or a libpq keyword DSN), with the right password and a wrong one."""
    from goodput_core.stores import open_store
    from tests.support.cli_process import synthetic_job_events

    db = "t_secret_" + request.param
    postgres_server.create_database(db)
    stores = {PASSWORD: postgres_server.url(db), WRONG: postgres_server.url(db, password=WRONG)}
    if request.param == "keywords":
        stores = {pw: _dsn(postgres_server, db, pw) for pw in (PASSWORD, WRONG)}
    store = open_store(stores[PASSWORD])  # the run the commands read
    store.append(list(synthetic_job_events("r")))
    store.close()
    return stores


@pytest.mark.parametrize("command", sorted(ec.INVOCATIONS))
def test_no_command_prints_a_store_password(addresses, tmp_path, command):
    inputs = ec.write_inputs(str(tmp_path / "in"))
    os.makedirs(tmp_path / "out")
    argvs = [ec.fill(argv, store=store, tmp=str(tmp_path / "out"), **inputs)
             for store in addresses.values() for argv in ec.INVOCATIONS[command]]
    results = ec.run_all(argvs, ec.env(str(tmp_path)), cwd=str(tmp_path))
    _assert_hidden(results, [PASSWORD, WRONG], tmp_path)
    if command == "report":
        # the commands do reach the store: the right password reads the run,
        # the wrong one is refused, saying so
        said = {a[-1] == "--json" and addresses[PASSWORD] in a: (code, out, err)
                for a, code, out, err in results if addresses[WRONG] not in a}
        code, out, err = said[True]
        assert code == 0 and (f"{USER}:***@" in out or "password=***" in out), (out, err)
        wrong = [err for a, _, _, err in results if addresses[WRONG] in a]
        assert wrong and all("password authentication failed" in e for e in wrong), wrong


def test_a_recorder_given_a_keyword_dsn_writes_to_postgresql(postgres_server, tmp_path,
                                                             monkeypatch):
    """P6: a libpq keyword DSN is a PostgreSQL store, never a file named after it."""
    from goodput_core.record.recorder import Recorder
    from goodput_core.stores import open_store

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    postgres_server.create_database("t_p6")
    dsn = _dsn(postgres_server, "t_p6", PASSWORD)
    rec = Recorder("p6", dsn, strict=True)
    rec.record_job_start_time(1_700_000_000.0)
    assert rec.close(60)
    # no file named after the DSN: only the directories set above (the journal
    # of a store other processes reach lives in $XDG_DATA_HOME/goodput/spill)
    assert set(os.listdir(tmp_path)) <= {"data", "cache"}
    names = [n for _, dirs, files in os.walk(tmp_path) for n in dirs + files]
    assert not any(PASSWORD in n or "dbname" in n for n in names), names
    store = open_store(postgres_server.url("t_p6"), create=False)
    try:
        assert [e.time for e in store.read("p6")[0]] == [1_700_000_000.0]
        assert store.url == f"postgresql://{USER}:***@127.0.0.1:{postgres_server.port}/t_p6"
    finally:
        store.close()
    shown = open_store(dsn, create=False)
    try:
        assert shown.url == (f"host=127.0.0.1 port={postgres_server.port} user={USER} "
                             "password=*** dbname=t_p6")
    finally:
        shown.close()


def _dead_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


def test_no_command_prints_an_endpoint_password_or_an_otlp_header(tmp_path):
    """O3 and O4, through the real OpenTelemetry SDK and its exporters."""
    from goodput_core.stores import open_store
    from tests.support.cli_process import synthetic_job_events

    good = f"sqlite:///{tmp_path}/good.sqlite"
    store = open_store(good)
    store.append(list(synthetic_job_events("r")))
    store.close()
    endpoint = f"http://collector-user:Endp0int-PW@127.0.0.1:{_dead_port()}"
    headers = "authorization:Bearer%20Hdr-T0ken-1,x-api-key=Hdr-T0ken-2\nnext=Hdr-T0ken-3"
    environ = ec.env(str(tmp_path), {"OTEL_EXPORTER_OTLP_HEADERS": headers,
                                     "OTEL_EXPORTER_OTLP_TIMEOUT": "300"})
    argvs = [ec.fill(argv, good=good, endpoint=endpoint)
             for invocations in ec.ENDPOINT_INVOCATIONS.values() for argv in invocations]
    argvs += [argv + ["--protocol", "grpc"] for argv in argvs if argv[0] == "export"]
    results = ec.run_all(argvs, environ, cwd=str(tmp_path))
    _assert_hidden(results, ["Endp0int-PW", "collector-user", "Hdr-T0ken-1", "Hdr-T0ken-2",
                             "Hdr-T0ken-3"], tmp_path)
    err = "".join(r[3] for r in results)
    # the SDK did warn about the malformed header (its line went through the filter)
    warned = [line for line in err.splitlines() if "Header format invalid" in line]
    assert warned and all(line.endswith("***") for line in warned), warned
    assert "http://***@127.0.0.1" in err  # the export said where it sent, redacted
    grpc = [r for r in results if "grpc" in r[0]]
    assert grpc and all(code == 2 and "holds a user part" in e for _, code, _, e in grpc)
