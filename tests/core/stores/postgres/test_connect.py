"""Every way libpq users connect reaches the PostgreSQL store's server; a wrong
one is a one-line error that names what to fix, with the password hidden.

A real server from Debian's ``postgresql`` (tests/support/postgres_server.py)
on loopback TCP (password auth) and a Unix socket (trust), plus one serving
TLS with a certificate from a test CA.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import psycopg
import pytest

from goodput_core.events import EventRecord
from goodput_core.stores import StoreError, open_store
from goodput_core.stores.postgres import PostgresStore
from goodput_core.stores.postgres.connect import ConnectionSlot
from goodput_core.redact import redact
from goodput_core.stores.postgres.sql import parse_url
from tests.support.postgres_server import PASSWORD, USER, PostgresServer, skip_without_postgres
from tests.support.fake_clock import FakeClock
from tests.support.tls_ca import make_ca

skip_without_postgres()  # .ci/run and `make test` install it

_PG_VARS = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGPASSWORD", "PGDATABASE",
            "PGSERVICE", "PGSERVICEFILE", "PGPASSFILE", "PGSSLMODE", "PGSSLROOTCERT")


@pytest.fixture
def db(postgres_server, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # spill files
    for var in _PG_VARS:  # only what a test sets
        monkeypatch.delenv(var, raising=False)
    name = "c_" + uuid.uuid4().hex[:12]
    postgres_server.create_database(name)
    return name


def _round_trip(url: str, run: str = "r") -> None:
    """Opens the store at ``url``, stores one event and reads it back."""
    store = PostgresStore(url, backoff_initial_s=0.01, backoff_max_s=0.05)
    event = EventRecord(run, 1, 5.0, 3, None, 0, "h", 1, "a", 1, 6.0)
    store.append([event])
    assert store.flush(30), store.stats()
    assert store.read(run)[0] == [event]
    store.close()


def _refused(url: str) -> str:
    with pytest.raises(StoreError) as info:
        open_store(url)
    text = str(info.value)
    assert "\n" not in text and PASSWORD not in text
    return text


def test_tcp_with_the_password_in_the_url(postgres_server, db):
    _round_trip(postgres_server.url(db))


def test_a_unix_socket_directory(postgres_server, db):
    # The socket is <dir>/.s.PGSQL.<port>; local connections are trusted.
    sockets, port = postgres_server.socket_dir, postgres_server.port
    _round_trip(f"postgresql://{USER}@/{db}?host={sockets}&port={port}")
    _round_trip(f"postgresql://{USER}@%2F{sockets.lstrip('/').replace('/', '%2F')}"
                f":{port}/{db}")  # the socket directory as a percent-encoded host


@pytest.mark.parametrize("url", ["postgresql://", "postgresql:///{db}", "postgres://"])
def test_everything_from_the_pg_variables(postgres_server, db, monkeypatch, url):
    monkeypatch.setenv("PGHOST", "127.0.0.1")
    monkeypatch.setenv("PGPORT", str(postgres_server.port))
    monkeypatch.setenv("PGUSER", USER)
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    monkeypatch.setenv("PGDATABASE", db if "{db}" not in url else "postgres")
    _round_trip(url.format(db=db))
    reader = psycopg.connect(postgres_server.url(db))  # the events went to that database
    assert reader.execute("SELECT count(*) FROM goodput.events").fetchone()[0] == 1
    reader.close()


def test_several_hosts_fail_over_to_the_one_that_answers(postgres_server, db):
    # Port 1 refuses; libpq tries the next host of the list.
    _round_trip(f"postgresql://{USER}:{PASSWORD}@127.0.0.1:1,127.0.0.1:{postgres_server.port}/{db}")
    _round_trip(f"postgresql://{USER}:{PASSWORD}@/{db}?host=127.0.0.1,127.0.0.1"
                f"&port=1,{postgres_server.port}&schema=other")


def test_a_service_file(postgres_server, db, tmp_path, monkeypatch):
    services = tmp_path / "pg_service.conf"
    services.write_text(f"[training]\nhost=127.0.0.1\nport={postgres_server.port}\nuser={USER}\n"
                        f"password={PASSWORD}\ndbname={db}\n")
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    _round_trip("postgresql://?service=training")
    monkeypatch.setenv("PGSERVICE", "training")
    _round_trip("postgresql://?schema=by_env")
    text = _refused("postgresql://?service=no_such_service")
    assert "no_such_service" in text and "PGSERVICEFILE" in text


def test_a_passfile(postgres_server, db, tmp_path):
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{postgres_server.port}:*:{USER}:{PASSWORD}\n")
    passfile.chmod(0o600)  # libpq ignores a passfile others may read
    _round_trip(f"postgresql://{USER}@127.0.0.1:{postgres_server.port}/{db}?passfile={passfile}")
    passfile.write_text(f"127.0.0.1:{postgres_server.port}:*:{USER}:not-it\n")
    text = _refused(
        f"postgresql://{USER}@127.0.0.1:{postgres_server.port}/{db}?passfile={passfile}")
    assert "password authentication failed" in text and "passfile" in text


def test_wrong_forms_are_one_line_errors_that_name_what_to_fix(postgres_server, db, tmp_path,
                                                               monkeypatch):
    cases = {
        postgres_server.url(db, password="wrong-" + PASSWORD): "check the user and password",
        f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{postgres_server.port}/nodb":
            "check the database name",
        f"postgresql://{USER}@/{db}?host={tmp_path}&port={postgres_server.port}": str(tmp_path),
        f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{postgres_server.port}/{db}?sslmode=require":
            "SSL",
        f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{postgres_server.port}/{db}?sslmode=bogus":
            "sslmode",
        f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{postgres_server.port}/{db}?colour=blue":
            "fix that URL parameter",
    }
    for url, needle in cases.items():
        text = _refused(url)
        assert needle in text, (url, text)
        assert redact(url) in text  # says which store (password shown as ***)
    # A password given as a parameter is hidden too.
    text = _refused(f"postgresql://{USER}@127.0.0.1:{postgres_server.port}/{db}?password=wrong-"
                    f"{PASSWORD}")
    assert "password=***" in text and "check the user and password" in text
    # A password from the environment never shows either.
    monkeypatch.setenv("PGPASSWORD", "wrong-" + PASSWORD)
    assert "check the user and password" in _refused(
        f"postgresql://{USER}@127.0.0.1:{postgres_server.port}/{db}")


def test_our_schema_parameter_is_taken_out_and_the_rest_kept():
    got = parse_url("postgresql://u:p%40ss@h1:1,h2:2/db?sslmode=verify-full&schema=team"
                    "&sslrootcert=%2Fca.pem")
    assert got.conninfo == "postgresql://u:p%40ss@h1:1,h2:2/db?sslmode=verify-full" \
                           "&sslrootcert=%2Fca.pem"
    assert got.schema == "team" and "p@ss" in got.secrets
    assert got.redacted == "postgresql://u:***@h1:1,h2:2/db?sslmode=verify-full&schema=team" \
                           "&sslrootcert=%2Fca.pem"
    assert parse_url("postgresql://").conninfo == "postgresql://"
    assert parse_url("postgresql:///db?password=x").redacted == "postgresql:///db?password=***"


# ------------------------------------------------------------------ TLS
@pytest.fixture(scope="module")
def tls_server():
    ca = make_ca()
    srv = PostgresServer(tls=ca.issue())
    srv.start()
    yield srv, ca
    srv.stop()
    srv.remove()


def test_tls_verify_full_against_a_test_ca_and_a_wrong_ca_is_a_clear_error(tls_server,
                                                                          tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    srv, ca = tls_server
    good, wrong = tmp_path / "ca.pem", tmp_path / "other-ca.pem"
    good.write_bytes(ca.cert_pem)
    wrong.write_bytes(make_ca("someone else's CA").cert_pem)
    url = srv.url("postgres", query=f"sslmode=verify-full&sslrootcert={good}")
    _round_trip(url)
    with psycopg.connect(srv.url("postgres", query=f"sslmode=verify-full&sslrootcert={good}"),
                         autocommit=True) as conn:  # the session really is encrypted
        assert conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
                            ).fetchone()[0] is True
    text = _refused(srv.url("postgres", query=f"sslmode=verify-full&sslrootcert={wrong}"))
    assert "certificate verify failed" in text and "sslrootcert" in text
    text = _refused(srv.url("postgres", query="sslmode=verify-full&sslrootcert="
                                             f"{tmp_path / 'missing.pem'}"))
    assert "sslrootcert" in text


# ------------------------------------------------------------------ connection use
class _FakeConn:
    def __init__(self):
        self.closed = False
        self.info = SimpleNamespace(transaction_status=psycopg.pq.TransactionStatus.IDLE)

    def close(self):
        self.closed = True


def test_the_slot_waits_a_growing_jittered_delay_after_each_refusal():
    clock = FakeClock(100.0)
    draws = iter([0.0, 1.0, 0.5, 0.5])  # jitter factor = 0.5 + draw
    attempts = []

    def opener():
        attempts.append(clock())
        if len(attempts) <= 4:
            raise psycopg.OperationalError("FATAL: sorry, too many clients already")
        return _FakeConn()

    slot = ConnectionSlot(opener, backoff=(0.25, 1.0), clock=clock, rng=lambda: next(draws))

    def lease_at(t):
        clock.advance(t - clock())
        with slot.lease() as conn:
            return conn

    # By hand: the step doubles 0.25, 0.5, 1.0, then stays at 1.0 (the longest); each
    # delay is step * (0.5 + draw): 0.125, 0.75, 1.0, 1.0 -> the next attempts at
    # 100.125, 100.875, 101.875, 102.875 (binary fractions: exact in floats).
    for t, held in [(100.0, False), (100.0625, True), (100.125, False), (100.75, True),
                    (100.875, False), (101.875, False)]:
        with pytest.raises((psycopg.OperationalError, StoreError)) as info:
            lease_at(t)
        assert isinstance(info.value, StoreError) is held, t
        assert not held or info.value.overload  # a full server: stores open anyway
    assert attempts == [100.0, 100.125, 100.875, 101.875]
    assert slot.counts == {"refused": 4, "held_back": 2}
    conn = lease_at(102.875)
    assert attempts[-1] == 102.875 and conn.closed  # nobody waits: given back at once
    assert slot.counts["opened"] == 1
    kept = None
    with slot.lease(more=lambda: True) as kept:  # another batch ready: kept for it
        pass
    assert not kept.closed
    with slot.lease() as again:
        assert again is kept
    assert kept.closed and slot.counts["opened"] == 2


def test_an_idle_process_holds_no_connection(postgres_server, db):
    store = PostgresStore(postgres_server.url(db), flush_interval_s=0.05)
    store.append([EventRecord("idle", 1, 1.0, None, None, 0, "h", 1, "a", 1)])
    assert store.flush(30)
    with psycopg.connect(postgres_server.url(db), autocommit=True) as watch:
        # A closed connection's server process may linger a moment: wait it out.
        for _ in range(200):
            left = watch.execute("SELECT count(*) FROM pg_stat_activity WHERE"
                                 " application_name = 'goodput'").fetchone()[0]
            if left == 0:
                break
            watch.execute("SELECT pg_sleep(0.05)")
        assert left == 0
    assert store.stats()["connections"]["opened"] == 2  # the tables' check, the batch
    store.close()
