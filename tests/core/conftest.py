"""Fixtures shared by the engine's tests (tests/core/<group>/...)."""

import uuid

import pytest


@pytest.fixture(scope="module")
def postgres_server():
    """A throwaway PostgreSQL server for one test module
    (:class:`tests.support.postgres_server.PostgresServer`); skipped without
    PostgreSQL or with ``SYSTEM_PACKAGES=0``, an error in CI without it
    (:func:`~tests.support.postgres_server.skip_without_postgres`)."""
    from tests.support.postgres_server import PostgresServer, skip_without_postgres

    skip_without_postgres()
    srv = PostgresServer()
    srv.start()
    yield srv
    try:
        srv.stop()
    except RuntimeError:  # a test stopped it on purpose (an outage) and it stayed down
        pass
    srv.remove()


@pytest.fixture
def postgres_url(postgres_server, tmp_path, monkeypatch):
    """The URL of a fresh database on :func:`postgres_server`; this test's
    spill files stay in its own directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    name = "t_" + uuid.uuid4().hex[:12]
    postgres_server.create_database(name)
    return postgres_server.url(name)


@pytest.fixture(params=["records", "store"])
def read_path(request, tmp_path, monkeypatch):
    """Runs a test of rule 13 built with :func:`tests.support.writers.job`
    twice: its events given to the calculator as records (the per-event
    pass), and written to a SQLite store read by columns per writer (the
    many-hosts path)."""
    from tests.support import writers

    monkeypatch.setattr(writers, "STORE_DIR", None if request.param == "records" else
                        str(tmp_path))
    return request.param
