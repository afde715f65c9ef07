"""Team memory: one project's memory shared through a PostgreSQL server (docs/team.md).

psycopg is imported only inside this package, and only once a project is shared or a
`nmem team` command runs: the default install and the daemon without team settings never load it.
"""

import os
import sys

PSYCOPG: str = "psycopg[binary,pool]"


def install_hint(prefix: str | None = None) -> str:
    """How to add psycopg to the environment this nmem runs in: a pipx or uv tool install has its
    own virtualenv, which `pip install 'nmem-agent-memory[team]'` in a shell never reaches."""
    where = os.path.realpath(prefix or sys.prefix)
    parts = where.split(os.sep)
    if "pipx" in parts and "venvs" in parts:
        return f"pipx inject {parts[-1]} '{PSYCOPG}'"
    if "uv" in parts and "tools" in parts:
        return f"uv tool install --with '{PSYCOPG}' {parts[-1]}"
    return f"{sys.executable} -m pip install '{PSYCOPG}'"


def needs_psycopg() -> str:
    """The one line every team command says when psycopg is missing."""
    return f"team memory needs psycopg: {install_hint()}"
