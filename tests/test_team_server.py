"""Team memory, the server side: the test cluster, the schema and its migrations, the admin commands."""

from __future__ import annotations

import psycopg
import pytest
from pg_cluster import Database

pytestmark = pytest.mark.postgres


def test_each_test_gets_a_fresh_database_owned_by_a_createrole_admin(pg_db: Database) -> None:
    with psycopg.connect(pg_db.admin_dsn) as conn:
        user, db = conn.execute("SELECT current_user, current_database()").fetchone()  # type: ignore[misc]
        assert (user, db) == (pg_db.admin, pg_db.name)
        flags = conn.execute("SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = current_user").fetchone()
        assert flags == (False, True)
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'nmem'").fetchone() == (0,)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(pg_db.dsn(pg_db.admin, "not-the-password"))
