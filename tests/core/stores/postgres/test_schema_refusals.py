"""A PostgreSQL schema newer than this code, or one of another application's,
is refused by writers and ``compact``, and nothing is added to it (issue 43: X3)."""

import pytest

from goodput_core.stores import StoreError, open_store
from tests.support import every_command as ec
from tests.support.postgres_server import skip_without_postgres

skip_without_postgres()


def _pg(postgres_url, sql):
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        return conn.execute(sql).fetchall() if sql.lstrip().upper().startswith("SELECT") \
            else conn.execute(sql)


def test_postgresql_newer_or_foreign_schemas_are_refused(postgres_server, postgres_url, tmp_path):
    open_store(postgres_url).close()
    _pg(postgres_url, "DROP TABLE goodput.chunks")
    _pg(postgres_url, "UPDATE goodput.meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="schema version 99"):
        open_store(postgres_url)
    code, _, err = ec.run(["compact", postgres_url], ec.env(str(tmp_path)), str(tmp_path))
    assert code == 2 and "schema version 99" in err
    assert _pg(postgres_url, "SELECT to_regclass('goodput.chunks') IS NULL") == [(True,)]
    # another application's schema: nothing of ours is created in it
    _pg(postgres_url, "CREATE TABLE public.users (id INTEGER)")
    with pytest.raises(StoreError, match="holds other tables \\(users\\)"):
        open_store(postgres_url + "?schema=public")
    assert _pg(postgres_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'") == \
        [("users",)]
