"""Every error nmem raises on purpose, under one root.

* NmemError
  + ConfigError          a config file or variable is wrong
  + StorageError         SQLite could not do what was asked
    - StorageFullError   the disk (or max_page_count) is full
    - ShuttingDown       the daemon stopped taking events (nothing stored)
  + DaemonError          the daemon could not start or be reached
    - AlreadyRunning     another nmemd holds the instance lock
    - UnsafePathError    a state directory or socket has unsafe ownership or mode
    - DaemonUnavailable  no daemon answered
      · WrongStore       the daemon that answered serves another NMEM_HOME
      · NotAnswering     a daemon holds the socket but does not answer (stopped, frozen)
  + InvalidEvent         a hook payload is not a JSON object we can store
  + QueryError           a search or lookup asked something it cannot answer
  + ToolInputError       an MCP tool argument it cannot use
  + UnknownMethod        an RPC method that does not exist
  + UnknownJob           a maintenance job name that does not exist
  + ImportParamsError    a malformed `import_events` request
  + TransferError        an export file that cannot be read
  + SettingsError        an agent's settings file that cannot be read or written safely
  + ServiceError         no usable service manager, or it refused
  + TeamError            a team server unreachable, refusing, or holding what we cannot use
    - TeamSchemaError    the server has no nmem schema, or a newer one than this nmem
"""

from __future__ import annotations

from typing import Final


class NmemError(Exception):
    """Base of every error nmem raises on purpose."""


class ConfigError(NmemError):
    """A config file or environment variable has an unknown key or a wrong value."""


class StorageError(NmemError):
    """SQLite failed; the transaction was rolled back and nothing was acknowledged."""


class StorageFullError(StorageError):
    """The database cannot grow: the disk or `max_page_count` is full."""


class ShuttingDown(StorageError):
    """The daemon is stopping and takes no more events; the sender keeps (or falls back with) its own."""


class DaemonError(NmemError):
    """The daemon could not start, or could not be reached."""


class AlreadyRunning(DaemonError):
    """Another nmemd holds the instance lock for this socket."""


class UnsafePathError(DaemonError):
    """A state directory or socket is a symlink, owned by someone else, or too open."""


class DaemonUnavailable(DaemonError):
    """No daemon answered on the socket."""


class WrongStore(DaemonUnavailable):
    """The daemon on the socket serves another NMEM_HOME: it refused, and this store has none."""


class NotAnswering(DaemonUnavailable):
    """A daemon accepts connections on the socket but answers nothing in time (SIGSTOP, frozen)."""


class InvalidEvent(NmemError):
    """A hook payload is empty, not UTF-8 JSON, too deep, or not an object."""


class QueryError(NmemError):
    """A search or lookup was asked something it cannot answer (empty query, bad filter)."""


class UnknownJob(NmemError):
    """A job name that does not exist (the message lists the known ones)."""


class ImportParamsError(NmemError):
    """An `import_events` request is malformed."""


class TransferError(NmemError):
    """An export file cannot be read, or holds lines that are not records."""


class UnknownMethod(NmemError):
    """The RPC method does not exist."""


class ServiceError(NmemError):
    """No usable service manager, or systemctl/launchctl refused or timed out."""


class SettingsError(NmemError):
    """A Claude Code settings file cannot be read or written safely."""


class ToolInputError(NmemError):
    """An argument the tool cannot use (bad time, unknown project, ambiguous session prefix)."""


class TeamError(NmemError):
    """A team server (PostgreSQL) is unreachable, refused (credentials, privileges), or holds
    something this nmem cannot use. The message is one line, without the password."""


class TeamTimeout(TeamError):
    """The team server gave up on a search at its statement timeout (the connection is fine)."""


class TeamSchemaError(TeamError):
    """The server has no nmem schema, or a newer one than this nmem knows."""


class TeamUnreachable(TeamError):
    """The team server cannot be reached now (down, a network that stalls or drops): try again later."""


class TeamRefused(TeamError):
    """The team server refused who we are or what we asked (password, privileges, not a member)."""


def _kinds(cls: type[NmemError]) -> dict[str, type[NmemError]]:
    found: dict[str, type[NmemError]] = {}
    for sub in cls.__subclasses__():
        if sub.__module__ == __name__ and not issubclass(sub, DaemonError):
            found[sub.__name__] = sub
        found.update(_kinds(sub))
    return found


# The kinds a daemon-side error crosses the RPC under (`ERR <kind> <message>`, daemon.server.rpc_reply),
# so that the CLI raises what the daemon raised (control.control). Not the DaemonError family: on the
# CLI's side those say the daemon itself could not be reached or started.
RPC_KINDS: Final[dict[str, type[NmemError]]] = _kinds(NmemError)


def rpc_kind(exc: NmemError) -> str | None:
    """The kind `exc` crosses the RPC under: its own class's, else its nearest ancestor's in RPC_KINDS."""
    return next((c.__name__ for c in type(exc).__mro__ if RPC_KINDS.get(c.__name__) is c), None)
