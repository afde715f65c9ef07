"""The hook client's code (nmem-send): forwards stdin to nmemd, fails open.

Hooks run it for every tool call, so it is written for start-up time: only
builtin modules on the hot path (`_socket`, `posix`, `sys`, `time`), no `json`
(the daemon parses), no `socket` (enum + selectors cost ~10 ms). Installed
hooks run `python -I -S /abs/path/nmem_client/send.py`, which imports this
module: a script is compiled on every run, a module comes from its cached bytecode.

Contract: always exit 0, never write to stderr, never wait past the timeout.
When no acknowledgement arrives, the event goes to the SQLite inbox under
the same `event_id`, so it is stored exactly once whichever path wins.

Claude Code ends: `claude -p` cancels hooks still running when it exits and
sends them SIGTERM. A SIGTERM while the client waits on the daemon stops the
wait and puts the event in the inbox (same `event_id`: stored once whether or
not the daemon had it), then the client exits 0; SIGTERM before or after the
wait is ignored, since what is left is short and bounded. The installed hook
command ignores SIGTERM before Python starts (`trap '' TERM; exec ...`), so
no signal can kill the client before it has read its event.

Other agents: `send.py --agent NAME` names the agent that sent the event (Claude Code's hooks
pass none). The name goes into the payload itself, as its first key `"nmem_agent"`, so it travels
with the event on every path (socket, inbox, drain) at the cost of one bytes concatenation; the
daemon takes it out again (nmemd.capture.extract). A malformed name is ignored.

SessionStart with no daemon: the event goes to the inbox, the client starts
the daemon and waits for it, bounded (`NMEM_START_WAIT_MS`), to answer the
same event with the context, so a session that starts after an on-first-use
daemon exited idle still gets its context. A daemon that cannot start says why on
a pipe and the wait ends at once, with a notice for the user instead of the context.

NMEM_HOME that cannot be used (a file, another user's folder, a path that cannot be
made): the event goes to a private spool outside it (nmem_client.fallback), no daemon
is started, and a SessionStart is answered with a notice that says so.
"""

import _signal  # type: ignore[import-not-found]  # builtin; `signal` imports enum
import _socket
import posix
import sys
import time

from nmem_client import paths, protocol

DEFAULT_TIMEOUT_MS = 500
# Why 500 ms: an idle daemon acknowledges in ~1-3 ms and under a 32-client
# flood in tens of ms, so 500 ms only fires when the daemon is stuck; then the
# fallback costs ~15 ms more. Tool hooks, SessionEnd and (prompt recall off) UserPromptSubmit run
# async, so the agent never waits for them; it waits for SessionStart and the end-of-turn hooks.

_ABSENT_ERRNOS = (2, 61, 111)  # ENOENT, ECONNREFUSED (macOS 61, Linux 111)
# SessionStart's hook timeout is 10 s (nmemd.setup.settings_file); a daemon starts in ~0.3-1 s,
# several seconds on a machine kept busy.
DEFAULT_START_WAIT_MS = 6000
START_POLL_S = 0.01
STARTING_POLL_S = 0.05  # a daemon that opens its store (a migration may take a minute) is asked this often


class Terminated(OSError):
    """SIGTERM arrived while the client waited on the daemon."""


_waiting = False  # a SIGTERM now ends the wait (Terminated); at any other time it is ignored


def _on_sigterm(signum: int, frame: object) -> None:
    _signal.signal(_signal.SIGTERM, _signal.SIG_IGN)  # what remains is bounded: finish it
    if _waiting:
        raise Terminated("terminated while waiting on the daemon")


def _ms_setting(name: str, default: int) -> float:
    raw = paths.env(name) or ""
    try:
        ms = int(raw) if raw else default
    except ValueError:
        ms = default
    return max(ms, 1) / 1000.0


def _timeout_s() -> float:
    return _ms_setting("NMEM_TIMEOUT_MS", DEFAULT_TIMEOUT_MS)


def read_reply(sock: "_socket.socket", deadline: float, buf: bytes = b"") -> tuple[bytes, bytes, bytes]:
    """Return (b"OK", body, rest) or (b"ERR", b"<code> <message>", rest).

    `rest` holds whatever arrived after the reply (the MCP bridge's first
    bytes; the next reply's, which `buf` then starts with). Raises OSError on
    a timeout, a closed peer or a malformed reply.
    """
    while b"\n" not in buf:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError("daemon closed the connection")
        buf += chunk
        if len(buf) > protocol.MAX_HEADER and b"\n" not in buf:
            raise OSError("reply header too long")
    head, _, rest = buf.partition(b"\n")
    if head.startswith(b"ERR "):
        return b"ERR", head[4:], rest
    if not head.startswith(b"OK ") or not head[3:].isdigit():
        raise OSError("malformed reply")
    size = int(head[3:])
    while len(rest) < size:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = sock.recv(max(size - len(rest), 65536))
        if not chunk:
            raise OSError("daemon closed the connection")
        rest += chunk
    return b"OK", rest[:size], rest[size:]


def deliver(
    kind: bytes, event_id: bytes, body: bytes, timeout: float, store: bytes | None = None
) -> tuple[bytes, bytes]:
    """Send one frame, naming the store it is for (`paths.store_id` unless `store`; b"": none), and
    wait for its reply. Raises OSError when the daemon is unreachable (Terminated when SIGTERM ends
    the wait)."""
    global _waiting
    deadline = time.monotonic() + timeout
    _waiting = True
    sock = None
    try:
        sock = _connected(timeout)
        try:
            sock.sendall(protocol.encode_request(kind, event_id, body, paths.store_id() if store is None else store))
        except OSError as exc:
            if exc.errno not in (32, 104):  # EPIPE, ECONNRESET: the daemon refused early; read why
                raise
        status, reply, _ = read_reply(sock, deadline)
        return status, reply
    finally:
        _waiting = False
        if sock is not None:
            sock.close()


def _connected(timeout: float) -> "_socket.socket":
    """A connection to the configured socket or, when nothing listens there, to the one the store's
    daemon named in its lock: a daemon started from another environment (issue #16, finding 1).
    The failure path only; the first error is the one raised."""
    target = paths.socket_path()
    try:
        return _open(target, timeout)
    except OSError as exc:
        other = paths.store_socket() if exc.errno in _ABSENT_ERRNOS else None
        if not other or other == target:
            raise
        try:
            return _open(other, timeout)
        except OSError:
            raise exc from None


def _open(target: str, timeout: float) -> "_socket.socket":
    if not paths.trusted_socket(target):  # another user's listener never gets a payload (finding 8)
        raise PermissionError(13, "not our daemon's socket", target)
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(target)
    except BaseException:
        sock.close()
        raise
    return sock


def hook_event(body: bytes, name: bytes = b'"hook_event_name"') -> bytes:
    """The payload's top-level `hook_event_name` (or `name`) without parsing JSON (b"" when not found).

    Claude Code writes it before `tool_input`, so the first key of that name is the top-level one.
    """
    key = body.find(name)
    if key < 0:
        return b""
    rest = body[key + len(name) : key + 80].lstrip(b" \t\r\n")
    if not rest.startswith(b":"):
        return b""
    rest = rest[1:].lstrip(b" \t\r\n")
    if not rest.startswith(b'"'):
        return b""
    return rest[1:].partition(b'"')[0]


# The events a session starts with, by payload key, by any agent's name for them: Claude Code's and most
# others' SessionStart, Cursor's sessionStart, Cline's TaskStart and TaskResume (its `hookName`). The
# daemon's agent registry holds the same (nmemd.registry; a test keeps the two equal).
START_EVENTS = {
    b'"hook_event_name"': (b"SessionStart", b"sessionStart"),
    b'"hookName"': (b"TaskStart", b"TaskResume"),
}


def starts_a_session(body: bytes) -> bool:
    """The event a session starts with, by any agent's name for it (START_EVENTS)."""
    return any(hook_event(body, key) in names for key, names in START_EVENTS.items())


def answer_after_start(
    event_id: bytes, body: bytes, report: int | None = None, agent: bytes = b"", until: float | None = None
) -> bytes:
    """Wait, bounded, for a daemon just started to listen, then send it the same event again
    (stored once: it is in the inbox or the spool under this id) for its reply; b"" when none comes in
    time (`until`, a `time.monotonic()`, else NMEM_START_WAIT_MS from now). A daemon that says on
    `report` (nmem_client.inbox.start_daemon) that it cannot start ends the wait at once, with a notice
    that names why and `nmem doctor` (issue #31, item 3)."""
    deadline = (
        until if until is not None else time.monotonic() + _ms_setting("NMEM_START_WAIT_MS", DEFAULT_START_WAIT_MS)
    )
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b""
        failed = _start_failure(report)
        if failed:
            from nmem_client import fallback

            why = failed.decode("utf-8", "replace")
            return fallback.notice_reply(agent, f"nmem: the daemon cannot start: {why}. Run `nmem doctor`.")
        try:
            status, reply = deliver(protocol.KIND_HOOK, event_id, body, left)
        except Terminated:
            return b""
        except OSError as exc:
            if getattr(exc, "errno", None) not in _ABSENT_ERRNOS and report is None:
                return b""  # listening but silent, or refused: the event waits in the inbox
            # With a report pipe, a daemon that closed on us (it listens before it opens the store,
            # then failed) says why on it: the next turn reads it.
            time.sleep(min(START_POLL_S, max(left, 0.0)))  # the daemon is still starting
            continue
        if status == b"ERR" and reply.startswith(protocol.BUSY_STARTING):  # it opens the store: asked again
            time.sleep(min(STARTING_POLL_S, max(left, 0.0)))
            continue
        return reply if status == b"OK" else b""


def _start_failure(report: int | None) -> bytes:
    """What a starting daemon wrote after `failed ` on its report pipe (b"": nothing yet, or it
    started, or it exited without a word: the socket is still polled until the deadline)."""
    if report is None:
        return b""
    try:
        said = posix.read(report, 4096)
    except OSError:  # EAGAIN: the daemon is still starting
        return b""
    return said[7:].strip()[:300] if said.startswith(b"failed ") else b""


AGENT_KEY = b'"nmem_agent"'
_AGENT_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789-")


def agent_arg(argv: list[str]) -> bytes:
    """The agent named by `--agent NAME` (or `--agent=NAME`) in the hook's command; b"" for none or a
    malformed one (lowercase letters, digits and '-', 1-32 of them)."""
    name = ""
    for i, arg in enumerate(argv):
        if arg == "--agent" and i + 1 < len(argv):
            name = argv[i + 1]
        elif arg.startswith("--agent="):
            name = arg[8:]
    raw = name.encode("ascii", "replace")
    if not 0 < len(raw) <= 32 or not all(c in _AGENT_CHARS for c in raw):
        return b""
    return raw


def with_agent(body: bytes, agent: bytes) -> bytes:
    """`body` (a JSON object) with `"nmem_agent": agent` as its first key; unchanged when it does not
    start as an object (the daemon refuses it anyway) or names an agent already."""
    if not agent:
        return body
    start = len(body) - len(body.lstrip())
    if body[start : start + 1] != b"{" or AGENT_KEY in body[: start + 200]:
        return body
    rest = body[start + 1 :]
    sep = b"" if rest.lstrip().startswith(b"}") else b","
    return body[: start + 1] + AGENT_KEY + b':"' + agent + b'"' + sep + rest


def _print(reply: bytes) -> None:
    out = sys.stdout
    if reply and out is not None:
        out.buffer.write(reply)
        out.flush()


def _read_stdin() -> bytes:
    stream = sys.stdin
    if stream is None:
        return b""
    try:
        return stream.buffer.read()
    except (OSError, ValueError):
        return b""


def run(argv: list[str] | None = None) -> int:
    _signal.signal(_signal.SIGTERM, _on_sigterm)
    body = _read_stdin()
    if not body.strip():
        from nmem_client import malformed  # counted for `nmem status`; Claude Code always sends a payload

        malformed.note(f"empty hook input from {malformed.sender()}")
        return 0
    agent = agent_arg(sys.argv[1:] if argv is None else argv)
    body = with_agent(body, agent)
    event_id = protocol.new_event_id()
    began = time.monotonic()
    daemon_absent = starting = False
    try:
        status, reply = deliver(protocol.KIND_HOOK, event_id, body, _timeout_s())
    except OSError as exc:
        status, reply = b"", b""
        daemon_absent = getattr(exc, "errno", None) in _ABSENT_ERRNOS
    if status == b"OK":
        _print(reply)
        return 0
    if status == b"ERR":
        code = reply.split(b" ", 1)[0]
        if code not in protocol.RETRYABLE and not reply.startswith(protocol.OLD_DAEMON_REPLY):
            return 0  # the daemon saw the event and refused it for good (and logged why)
        # A daemon of another store (a shared NMEM_SOCKET, a stale store.lock): ours is not running.
        daemon_absent = code == protocol.ERR_WRONG_STORE
        starting = reply.startswith(protocol.BUSY_STARTING)
    # Another user's NMEM_HOME gets nothing of ours (issue #16, finding 8), nor does a file or a path
    # that cannot be made: the event goes to a private spool outside it (issue #31, item 2).
    problem = paths.home_problem()
    if problem is None:
        from nmem_client import inbox  # the slow path pays for sqlite3 only when it is taken

        if starting and inbox.spooled(event_id.decode(), body):  # not behind a migration's write lock
            if starts_a_session(body):  # its context when the store opens within the ack's own timeout, as
                _print(answer_after_start(event_id, body, agent=agent, until=began + _timeout_s()))  # before
            return 0
        if inbox.store(event_id.decode(), body) != "lost":
            if daemon_absent and paths.env("NMEM_AUTOSTART") != "0":
                session = starts_a_session(body)
                report = inbox.start_daemon(report=session)
                if session:  # its reply is the context the session starts with
                    _print(answer_after_start(event_id, body, report, agent))
            return 0
        problem = inbox.failure or f"{paths.home()} cannot be created or written"
    from nmem_client import fallback

    kept = fallback.keep(event_id.decode(), body, problem)
    if starts_a_session(body):
        where = f"events wait in {kept} until it can" if kept else "events are not kept"
        _print(fallback.notice_reply(agent, f"nmem cannot use NMEM_HOME: {problem}; {where}. Run `nmem doctor`."))
    return 0


USAGE = """usage: nmem-send [--agent NAME] < HOOK_PAYLOAD.json

The hook client: reads one hook payload (JSON) on stdin, hands it to nmemd
(starting it when none runs; the inbox when it cannot answer), prints the hook's reply
(SessionStart's context) on stdout, and always exits 0. Hooks run it as
`python -I -S .../nmem_client/send.py`; `nmem install` writes them. `--agent NAME`
names the agent whose hook runs it (none: Claude Code).
"""


def main() -> None:
    """Console-script entry point: fail open whatever happens."""
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):  # a person asking; hooks pass none or --agent
        sys.stdout.write(USAGE)
        sys.stdout.flush()
        posix._exit(0)
    try:
        run()
    except BaseException:  # noqa: B036 - a hook must never fail the agent
        pass
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: B036
        pass
    posix._exit(0)
