"""The team server's migrations as files and the version rules a client and an admin share (no
server here: tests/daemon/test_team_server.py runs them against a real PostgreSQL)."""

from __future__ import annotations

import re
from importlib.resources import files

import pytest

from nmemd.errors import TeamSchemaError
from nmemd.team import schema
from nmemd.team.schema import ServerVersion


def test_migrations_are_plain_sql_files_numbered_in_order() -> None:
    folder = files("nmemd.team") / "sql"
    on_disk = sorted(p.name for p in folder.iterdir() if re.fullmatch(r"m\d{3}_\w+\.sql", p.name))
    assert on_disk == [f"{m.name}.sql" for m in schema.MIGRATIONS]
    for number, migration in enumerate(schema.MIGRATIONS, start=1):
        assert migration.version == number and migration.name.startswith(f"m{number:03d}_")
        assert 1 <= migration.compatible_since <= migration.version
        assert "{{" not in migration.sql and "@TRGM@" not in migration.sql  # no text templating
    since = [m.compatible_since for m in schema.MIGRATIONS]
    assert since == sorted(since)
    assert schema.SCHEMA_VERSION == schema.MIGRATIONS[-1].version
    assert schema.NEEDS_SERVER <= schema.SCHEMA_VERSION


def test_a_ledger_row_wins_and_v1s_single_row_is_a_floor() -> None:
    assert schema.read_version((None, None, None)) is None
    assert schema.read_version((None, None, 1)) == ServerVersion(1, 1)  # a v1 server: no ledger
    assert schema.read_version((3, 1, 1)) == ServerVersion(3, 1)
    assert schema.read_version((3, 1, 99)) == ServerVersion(99, 99)  # an edit of schema_version counts


def test_a_newer_server_is_used_when_it_says_this_nmem_is_compatible() -> None:
    newest = schema.SCHEMA_VERSION
    assert schema.usable(ServerVersion(newest + 5, newest)).version == newest + 5
    with pytest.raises(TeamSchemaError, match=rf"^server schema v{newest + 5} is newer than this nmem \(v{newest}\)"):
        schema.usable(ServerVersion(newest + 5, newest + 1))
    with pytest.raises(TeamSchemaError, match="^the server has no nmem schema: an admin runs `nmem team init"):
        schema.usable(None)
    with pytest.raises(TeamSchemaError, match=r"^server schema v1 is older than this nmem needs \(v2\): an admin"):
        schema.usable(ServerVersion(1, 1), needs=2)
