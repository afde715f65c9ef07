"""How a DSN reaches its server, and the rule the threat model sets for it: the network between a
member and the server is hostile.

A server on this machine (a Unix socket, `localhost`, a loopback address) is reached as the DSN
says. Any other host must be asked for `sslmode=verify-full` (the certificate and the host name
checked) and `channel_binding=require` (a relay that ends TLS cannot replay the SCRAM exchange):
both are added when the DSN says nothing, and a DSN that asks for less is refused unless the user
says `--insecure`. Host names are taken as written, never resolved (a name that resolves to
loopback today may not tomorrow).
"""

from __future__ import annotations

import ipaddress
from typing import Final

from nmemd.errors import TeamError
from nmemd.team import needs_psycopg

VERIFIED: Final = {"sslmode": "verify-full", "channel_binding": "require"}
INSECURE_HINT: Final = (
    "the network to a team server is not trusted: use sslmode=verify-full (with sslrootcert=) and"
    " channel_binding=require, or say --insecure to send it in plaintext anyway"
)


def _params(dsn: str) -> dict[str, str]:
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        raise TeamError(needs_psycopg()) from None
    try:
        return {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v not in (None, "")}
    except Exception:  # its message may quote the DSN, password and all
        raise TeamError("not a PostgreSQL DSN (key=value pairs, or a postgresql:// URI)") from None


def _local_host(host: str) -> bool:
    host = host.strip()
    if not host or host.startswith(("/", "@")) or host.lower() == "localhost":
        return True  # a Unix socket (libpq's default when no host is given), or the loopback name
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_local(dsn: str) -> bool:
    """Every host the DSN may connect to is on this machine (and so is every `hostaddr`)."""
    params = _params(dsn)
    hosts = params.get("host", "").split(",")
    addrs = [a for a in params.get("hostaddr", "").split(",") if a.strip()]
    return all(_local_host(h) for h in hosts) and all(_local_host(a) for a in addrs)


def secured(dsn: str, insecure: bool = False) -> str:
    """`dsn` as it may be used: unchanged for a local server; else with `sslmode=verify-full` and
    `channel_binding=require` added when unset. A non-local DSN that asks for less is a TeamError
    unless `insecure`, and then it is used as given."""
    if is_local(dsn):
        return dsn
    params = _params(dsn)
    weaker = {k: params[k] for k, v in VERIFIED.items() if k in params and params[k] != v}
    if insecure:
        return dsn
    if weaker:
        asked = ", ".join(f"{k}={v}" for k, v in weaker.items())
        raise TeamError(f"refused: {asked} to a server on another machine: {INSECURE_HINT}")
    from psycopg.conninfo import make_conninfo

    return str(make_conninfo(dsn, **{k: v for k, v in VERIFIED.items() if k not in params}))


def describe(dsn: str) -> str:
    """The transport in a few words, for join, status and doctor."""
    try:
        params = _params(dsn)
        local = is_local(dsn)
    except TeamError:
        return "unknown"
    if local:
        hosts = params.get("host", "")
        return "this machine (Unix socket)" if not hosts or hosts.startswith(("/", "@")) else "this machine (loopback)"
    mode = params.get("sslmode", "prefer")
    if mode == "verify-full":
        binding = ", channel binding" if params.get("channel_binding") == "require" else ""
        return f"TLS verify-full{binding}"
    if mode in ("require", "verify-ca"):
        return f"TLS {mode} (server name not checked: --insecure)"
    return "plaintext allowed (--insecure)"
