"""psycopg's errors become nmem's in one place (nmemd.team.pg_errors): a kind and one line."""

from __future__ import annotations

import psycopg

from nmemd.errors import TeamError, TeamRefused, TeamSchemaError, TeamUnreachable
from nmemd.team.pg_errors import translate


def test_each_failure_has_its_kind_and_one_line_naming_the_server() -> None:
    server = "al@db:5432/nmem"
    cases = [
        (psycopg.errors.InsufficientPrivilege("permission denied for table observations"), TeamRefused, "removed"),
        (psycopg.OperationalError('password authentication failed for user "al"'), TeamRefused, "wrong password"),
        (psycopg.OperationalError("connection refused\n\tIs the server running?"), TeamUnreachable, "cannot connect"),
        (psycopg.errors.UndefinedTable('relation "nmem.members" does not exist'), TeamSchemaError, "no nmem schema"),
        (TimeoutError(), TeamUnreachable, "did not answer in time"),
        (psycopg.errors.CheckViolation("new row violates check constraint"), TeamError, "refused"),
    ]
    for exc, kind, words in cases:
        got = translate(exc, server)
        assert type(got) is kind and words in str(got) and str(got).startswith(server), (exc, got)
        assert "\n" not in str(got)
    same = TeamError("as it was")
    assert translate(same) is same
    admin = translate(psycopg.errors.InsufficientPrivilege("permission denied to create role"), admin=True)
    assert isinstance(admin, TeamRefused) and "CREATEROLE" in str(admin)
