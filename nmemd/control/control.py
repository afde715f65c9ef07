"""Talk to a running daemon from outside it (the CLI, doctor, the service set-up, the viewer): ask,
read, start, stop, status.

Uses the same stdlib client as the hooks, so the CLI exercises the real wire.
"""

from __future__ import annotations

import _socket
import os
import signal
import sys
import time
from typing import Any, Final

import msgspec

from nmem_client import inbox, paths, protocol
from nmem_client.hook import deliver, read_reply
from nmemd.config import Settings
from nmemd.daemon.instance import holder, lock_holder, startup_problem
from nmemd.daemon.status import DaemonFacts, Status, database_facts
from nmemd.errors import (
    RPC_KINDS,
    DaemonError,
    DaemonUnavailable,
    NmemError,
    NotAnswering,
    StorageError,
    WrongStore,
)

RPC_TIMEOUT_S = 10.0
BUSY_RETRY_S = 0.01


def _request(kind: bytes, body: bytes, timeout: float) -> bytes:
    """One request; a full listen backlog (EAGAIN on connect: the daemon is up, flooded) is retried
    until `timeout`, so `nmem status` does not call a busy daemon absent. Hooks never wait so."""
    deadline = time.monotonic() + timeout
    store: bytes | None = None  # this store's id (deliver's default); b"" for a daemon older than it
    while True:
        try:
            status, reply = deliver(kind, protocol.NO_EVENT_ID, body, max(deadline - time.monotonic(), 0.001), store)
        except BlockingIOError as exc:
            if time.monotonic() + BUSY_RETRY_S >= deadline:
                raise DaemonUnavailable(f"the daemon accepts no connection (its queue is full): {exc}") from exc
            time.sleep(BUSY_RETRY_S)
            continue
        except TimeoutError as exc:
            raise _not_answering(timeout) from exc
        except OSError as exc:  # `deliver` also tried the socket the store's daemon serves
            raise DaemonUnavailable(f"no daemon answered: {exc}") from exc
        if status == b"ERR" and reply.startswith(protocol.OLD_DAEMON_REPLY) and store is None:
            store = b""  # a daemon from before the store token: asked again without it
            continue
        break
    return _answer(status, reply)


def _not_answering(timeout: float) -> NotAnswering:
    return NotAnswering(
        f"not answering: the daemon on {paths.socket_path()} accepts connections but said nothing"
        f" within {timeout:.3g} s (stopped or frozen?)"
    )


def _answer(status: bytes, reply: bytes) -> bytes:
    """An OK reply's body; a refusal raised as the error it names."""
    if status != b"OK":
        code, _, message = reply.decode(errors="replace").partition(" ")
        if code == protocol.ERR_WRONG_STORE.decode():
            raise WrongStore(f"the daemon on {paths.socket_path()} serves another store: {message}")
        raised = RPC_KINDS.get(code)  # the daemon's own error (server.rpc_reply), raised here as there
        if raised is not None and message:
            raise raised(message)
        raise DaemonError(message or f"the daemon refused the request ({code})")
    return reply


STARTING_WAIT_S = 3.0  # how long a read waits for a daemon that holds the lock but does not answer yet
FRESH_INBOX_S = 10.0  # an inbox event this recent was put there by a client that also started a daemon


def ask_or_starting(settings: Settings, method: str, params: dict[str, Any]) -> Any:
    """`ask`, waiting (bounded) for a daemon that is starting: one a hook just started has the events
    of that hook in its inbox, and a read of the database beside it would not see them yet. It is
    starting when it holds the lock, or, before it got that far, when the inbox holds an event a
    client put there moments ago (that client started it)."""
    deadline = time.monotonic() + STARTING_WAIT_S
    while True:
        try:
            return ask(method, params)
        except (NotAnswering, WrongStore):
            raise  # it holds the lock, and waiting would not help
        except DaemonUnavailable:
            starting = lock_holder(settings.lock) is not None or _fresh_inbox(settings.db)
            if time.monotonic() >= deadline or not starting:
                raise
            time.sleep(0.05)


def read(settings: Settings, method: str, params: dict[str, Any]) -> Any:
    """A read method's result: from the daemon when one runs, else the same `recall.methods.run_query`
    on a read-only connection (the CLI and the web viewer). Raises NmemError with the reason.

    A refusal also falls back to the local run: the reply's message is cut at 200 bytes, and the
    local run raises the same error with all of its message (an older daemon without the method
    simply answers locally)."""
    try:
        return ask_or_starting(settings, method, params)
    except (NotAnswering, WrongStore) as exc:  # answered from the file; the user learns why not from it
        starting = starting_note(settings) if isinstance(exc, NotAnswering) else ""
        why = f"the daemon does not answer yet{starting}" if starting else str(exc)
        sys.stderr.write(f"nmem: {why}; read {settings.db} directly\n")
    except (NmemError, msgspec.DecodeError):  # DaemonUnavailable, and the daemon's own error, included
        pass
    if not os.path.exists(settings.db):
        raise StorageError(
            f"no database yet at {settings.db}: nothing has been recorded (is the daemon or the hook set up?)"
        )
    import sqlite3

    from nmemd.store import readers  # only without a daemon (it brings anyio's threads)

    try:
        conn = readers.open_readonly(settings.db)
        try:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'observations'").fetchone() is None:
                raise StorageError(f"{settings.db} holds no memory yet: events wait in its inbox until the daemon"
                                   " runs (nmem daemon start)")  # fmt: skip
            from nmemd.recall.methods import run_query  # only without a daemon: search's imports cost ~10 ms

            return msgspec.to_builtins(run_query(conn, method, params))
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read {settings.db}: {exc}") from exc


def _fresh_inbox(db: str) -> bool:
    """Whether a client put an event in the inbox within FRESH_INBOX_S (a stale one waits for nobody)."""
    import sqlite3

    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.2)
        try:
            row = conn.execute("SELECT max(received_at) FROM inbox").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return bool(row and row[0] and time.time() - float(row[0]) < FRESH_INBOX_S)


ANSWER_S = 1.0  # a running daemon answers a ping in milliseconds, whatever else it is doing


# The read methods (`recall.methods.QUERIES`, tests/unit/test_control.py): asked again, they change nothing.
READS = frozenset({"search", "show", "timeline", "sessions", "file_history", "recent", "context", "project", "handoff"})


def ask(method: str, params: dict[str, Any] | None = None, timeout: float = RPC_TIMEOUT_S) -> Any:
    """Call one RPC method on the daemon; raise DaemonUnavailable when none answers (NotAnswering
    within ANSWER_S when one holds the socket but is stopped or frozen, WrongStore when it serves
    another NMEM_HOME), rather than wait out `timeout` on a method that may take long."""
    body = msgspec.json.encode({"method": method, "params": params or {}})
    if method in READS and (reply := _read_after_ping(body, timeout)) is not None:
        return msgspec.json.decode(reply)
    ping(ANSWER_S, strict=True)
    return msgspec.json.decode(_request(protocol.KIND_RPC, body, timeout))


def _read_after_ping(body: bytes, timeout: float) -> bytes | None:
    """A read method's ping and request sent together on one connection, the ping answered first (the
    daemon takes a connection's frames in turn): what `ping` then `_request` do on two connections,
    ~0.25 ms sooner (a search through the CLI, BENCHMARKS.md). None when the plain case does not
    hold (nothing at the configured socket, a full listen backlog, a daemon from before the store
    token): `ask` then asks as before. Only for reads: a frozen daemon may still run it later."""
    target = paths.socket_path()
    if not paths.trusted_socket(target):
        return None
    store = paths.store_id()
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(ANSWER_S)
        try:
            sock.connect(target)
            sock.sendall(
                protocol.encode_request(protocol.KIND_PING, protocol.NO_EVENT_ID, b"", store)
                + protocol.encode_request(protocol.KIND_RPC, protocol.NO_EVENT_ID, body, store)
            )
        except OSError:  # absent, refused, busy: the two connections' way says which, as before
            return None
        started = time.monotonic()
        try:
            status, reply, rest = read_reply(sock, started + ANSWER_S)
        except TimeoutError as exc:
            raise _not_answering(ANSWER_S) from exc
        except OSError:
            return None
        if status != b"OK":
            return None  # a daemon from before the store token refused the header (and closed)
        try:
            facts = msgspec.json.decode(reply, type=DaemonFacts)
        except msgspec.DecodeError:
            return None
        if facts.store is not None and facts.store != store.decode():
            raise WrongStore(f"the daemon on {facts.socket} (pid {facts.pid}) serves another store, {facts.home}")
        try:
            status, reply, _ = read_reply(sock, started + timeout, rest)
        except TimeoutError as exc:
            raise _not_answering(timeout) from exc
        except OSError as exc:
            raise DaemonUnavailable(f"no daemon answered: {exc}") from exc
        return _answer(status, reply)
    finally:
        sock.close()


def ping(timeout: float = 1.0, *, strict: bool = False, any_store: bool = False) -> DaemonFacts | None:
    """The facts of this store's daemon; None when none answers (`strict`: raise why). A daemon of
    another NMEM_HOME on the socket (it answers pings) is not this store's (`any_store`: it is
    returned all the same, for doctor to name it)."""
    try:
        facts = msgspec.json.decode(_request(protocol.KIND_PING, b"", timeout), type=DaemonFacts)
    except (DaemonError, msgspec.DecodeError):
        if strict:
            raise
        return None
    if any_store or facts.store is None or facts.store == paths.store_id().decode():
        return facts
    if strict:
        raise WrongStore(f"the daemon on {facts.socket} (pid {facts.pid}) serves another store, {facts.home}")
    return None


def status(settings: Settings) -> Status:
    """Ask the daemon; read the database read-only when none runs."""
    try:
        return msgspec.convert(ask("status"), Status)
    except DaemonUnavailable as exc:
        holder = None if isinstance(exc, WrongStore) else lock_holder(settings.lock)
        note = str(exc) if isinstance(exc, (NotAnswering, WrongStore)) else None
        starting = starting_note(settings) if isinstance(exc, NotAnswering) else ""
        if starting:  # a migration's index built again, not a frozen daemon
            note = f"not answering yet{starting}"
        facts = DaemonFacts(
            running=False, socket=settings.socket, pid=holder if holder and holder > 0 else None, note=note
        )
        return Status(daemon=facts, database=database_facts(settings.db, settings.spool))


def start(settings: Settings, timeout: float = 10.0, *, on_demand: bool = False) -> DaemonFacts:
    """Start a detached daemon unless one answers; wait until it accepts requests.

    `on_demand`: started for one job (an import), so it exits when idle like one a hook starts;
    `nmem daemon start` asks for one that stays."""
    facts = ping()
    if facts is not None:
        return facts
    other = ping(any_store=True)
    if other is not None and other.socket == settings.socket:  # not one reached through a stale store.lock
        raise DaemonError(
            f"the daemon on {settings.socket} (pid {other.pid}) serves another store, {other.home}; this store"
            f" ({settings.home}) needs a socket of its own: unset NMEM_SOCKET (each home gets its own), or stop"
            " that daemon"
        )
    elsewhere = serving_elsewhere(settings)
    if elsewhere:  # the daemon would exit at once: one store, one daemon (issue #16, finding 1)
        raise DaemonError(elsewhere)
    refused = startup_problem(settings.home, settings.socket)
    if refused:  # and so would it here, in the background (issue #16, finding 7)
        raise DaemonError(f"nmemd cannot start: {refused}")
    report = inbox.start_daemon(inbox.ON_FIRST_USE if on_demand else ("--started-by", "user"), report=True)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            facts = ping(0.5)
            if facts is not None:
                return facts
            said = _said(report)
            if said:  # it cannot start, and said why: no need to wait out the timeout
                raise DaemonError(f"nmemd cannot start: {said}; see {settings.log_dir}/nmemd.log")
            time.sleep(0.02)
    finally:
        if report is not None:
            os.close(report)
    raise DaemonError(
        f"nmemd did not start within {timeout:.0f} s{_why_not_yet(_last_log_line(settings))};"
        f" see {settings.log_dir}/nmemd.log"
    )


def _said(report: int | None) -> str:
    """What a starting daemon wrote after `failed ` on its report pipe (nmem_client.inbox.start_daemon)."""
    if report is None:
        return ""
    try:
        said = os.read(report, 4096)
    except OSError:  # still starting
        return ""
    return said[7:].decode("utf-8", "replace").strip() if said.startswith(b"failed ") else ""


_INDEXING_AGAIN: Final = (" again for full-text search", "indexed observations up to id ")


def _last_log_line(settings: Settings) -> str:
    """The daemon's log's last line ("" when there is none): its stderr goes to /dev/null."""
    try:
        with open(os.path.join(settings.log_dir, "nmemd.log"), "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
            tail = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return tail[-1] if tail else ""


def _indexing_again(last: str) -> str:
    """ ": it is still starting..." when the log's `last` line is repair's progress through an index a
    migration builds again before the daemon serves (~40 s at a million observations), else ""."""
    if not any(mark in last for mark in _INDEXING_AGAIN):
        return ""
    said = last.split(": ", 1)[-1]
    return (
        f": it is still starting, indexing the store again for this version's full-text index ({said});"
        " it answers once that is done, and hooks' events wait in its spool meanwhile"
    )


def starting_note(settings: Settings) -> str:
    """`_indexing_again` of the daemon's log: why a daemon that holds its socket does not answer yet ("" when
    the log does not say it is indexing the store again)."""
    return _indexing_again(_last_log_line(settings))


def _why_not_yet(last: str) -> str:
    """What the daemon's log's `last` line says it is doing: a "startup failed" line's reason, the
    index a migration has it build again, or nothing."""
    if "startup failed: " in last:
        return ": " + last.split("startup failed: ", 1)[1]
    return _indexing_again(last)


def serving_elsewhere(settings: Settings) -> str | None:
    """Why no daemon can start for this socket: one already serves this store on another socket
    (started from another environment: a terminal without XDG_RUNTIME_DIR, an MCP client that passes
    few variables). Events sent meanwhile wait in the inbox; that daemon drains it every 2 s."""
    held = holder(settings.store_lock)
    if held is None or not held[1] or held[1] == settings.socket:
        return None
    pid, socket = held
    return (
        f"nmemd already serves this store ({settings.home}) on {socket} (pid {pid}); this environment"
        f" points at {settings.socket}: set NMEM_SOCKET={socket}, or stop that daemon first"
    )


def stop(settings: Settings, timeout: float = 15.0) -> int | None:
    """Ask the daemon to stop (SIGTERM if it does not answer); return its pid, None if none ran."""
    pid = lock_holder(settings.lock)
    if pid is None:
        return None
    try:
        reply = ask("shutdown", timeout=2.0)
        pid = int(reply.get("pid", pid))
    except DaemonError:
        if pid > 0:
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # The lock goes with the store's last checkpoint; the process ends a little later (its threads,
        # its extraction worker): "stopped" means gone, so a start right after never meets it.
        if lock_holder(settings.lock) is None and not _alive(pid):
            return pid
        time.sleep(0.02)
    raise DaemonError(f"nmemd (pid {pid}) did not stop within {timeout:.0f} s")


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that pid
        return True
    try:  # our own child (a test started it): a zombie has exited
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True
