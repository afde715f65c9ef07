"""What a DSN may reach and how (issue #36, finding 15), and how psycopg is added to this nmem's own
environment (finding 21): pure functions, no server."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from nmemd.errors import TeamError
from nmemd.team import install_hint, transport


@pytest.mark.parametrize(
    "dsn",
    ["dbname=nmem", "host=/run/postgresql dbname=nmem", "host=localhost", "host=127.0.0.1", "host=::1",
     "postgresql://kim@[::1]:5433/nmem", "host=localhost,127.0.0.2"],
)  # fmt: skip
def test_a_server_on_this_machine_is_reached_as_the_dsn_says(dsn: str) -> None:
    assert transport.is_local(dsn)
    assert transport.secured(dsn) == dsn
    assert transport.describe(dsn).startswith("this machine")


@pytest.mark.parametrize(
    "dsn",
    ["host=db.example.com", "postgresql://kim:pw@10.0.0.5/nmem", "host=localhost,db.example.com",
     "host=db.example.com hostaddr=127.0.0.1", "host=localhost hostaddr=10.1.2.3", "host=localhost.example.com"],
)  # fmt: skip
def test_another_machine_gets_verified_tls_and_channel_binding(dsn: str) -> None:
    assert not transport.is_local(dsn)
    params = conninfo_to_dict(transport.secured(dsn))
    assert (params["sslmode"], params["channel_binding"]) == ("verify-full", "require")
    assert transport.describe(transport.secured(dsn)) == "TLS verify-full, channel binding"


@pytest.mark.parametrize(
    "weaker", ["sslmode=disable", "sslmode=allow", "sslmode=prefer", "sslmode=require", "sslmode=verify-ca",
               "channel_binding=prefer", "channel_binding=disable"],
)  # fmt: skip
def test_asking_for_less_is_refused_unless_insecure(weaker: str) -> None:
    dsn = f"host=db.example.com user=kim password=s3cr3tzz {weaker}"
    with pytest.raises(TeamError, match="--insecure") as caught:
        transport.secured(dsn)
    assert "s3cr3tzz" not in str(caught.value)
    assert transport.secured(dsn, insecure=True) == dsn
    assert "--insecure" in transport.describe(dsn) or transport.describe(dsn).startswith("TLS verify-full")


def test_psycopg_is_added_where_this_nmem_lives() -> None:
    pipx = install_hint("/home/kim/.local/share/pipx/venvs/nmem-agent-memory")
    assert pipx == "pipx inject nmem-agent-memory 'psycopg[binary,pool]'"
    uv = install_hint("/home/kim/.local/share/uv/tools/nmem-agent-memory")
    assert uv == "uv tool install --with 'psycopg[binary,pool]' nmem-agent-memory"
    assert install_hint("/home/kim/src/nmem/.venv").endswith("-m pip install 'psycopg[binary,pool]'")
