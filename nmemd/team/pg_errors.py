"""The one translation of psycopg's errors into nmem's (nmemd/errors.py): a TeamError kind and one
line without the password, for the daemon's links, searches, `nmem team` and the admin's commands.
psycopg is imported only when there is an error of it to translate."""

from __future__ import annotations

from nmemd.errors import TeamError, TeamRefused, TeamSchemaError, TeamUnreachable
from nmemd.team import needs_psycopg


def _line(text: str) -> str:
    return " ".join(text.split())


def translate(exc: BaseException, server: str = "", *, admin: bool = False) -> TeamError:
    """`exc` as a TeamError: unreachable (network, timeout, server down), refused (password,
    privileges, not a member), no or another schema, or what the server said. `server` names it
    (`user@host:port/db`); `admin` words a refusal for an admin's set-up commands."""
    if isinstance(exc, TeamError):
        return exc
    where = f"{server}: " if server else ""
    if isinstance(exc, ModuleNotFoundError) and "psycopg" in str(exc):
        return TeamError(needs_psycopg())
    if isinstance(exc, TimeoutError):
        return TeamUnreachable(f"{where}the server did not answer in time (stalled network?)")
    try:
        import psycopg
    except ImportError:  # pragma: no cover - a psycopg error implies psycopg
        return TeamError(f"{where}{_line(str(exc)) or type(exc).__name__}")
    diag = getattr(exc, "diag", None)
    text = _line(getattr(diag, "message_primary", None) or str(exc)) or type(exc).__name__
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        why = "the admin role needs CREATEROLE and CREATE on the database" if admin else "removed from the team?"
        return TeamRefused(f"{where}the server refused: {text} ({why})")
    if isinstance(
        exc, psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName | psycopg.errors.UndefinedFunction
    ):
        return TeamSchemaError(f"{where}no nmem schema there ({text}): run `nmem team init ADMIN_DSN --team NAME`")
    if isinstance(exc, psycopg.OperationalError):
        if "password authentication failed" in text or "no password supplied" in text:
            return TeamRefused(f"{where}wrong password or unknown member ({text})")
        if admin:
            return TeamUnreachable(f"cannot reach the team server: {text.removeprefix('connection failed: ')}")
        return TeamUnreachable(f"{where}cannot connect: {text}")
    if isinstance(exc, psycopg.Error):
        return TeamError(f"{where}the team server refused: {text}")
    return TeamError(f"{where}{type(exc).__name__}: {text}")
