"""nmem-mcp: connects a stdio MCP client (Claude Code) to the MCP server inside nmemd.

A byte pump, stdlib only: `import mcp` costs ~1 s and belongs in the daemon,
which already holds the database. The bridge connects to the daemon's socket
(starting the daemon when it is absent), asks for an MCP session scoped to the
caller's project, then copies stdin to the socket and the socket to stdout.
Framing is the daemon's business: both sides speak one JSON-RPC message per line.

Exit 0 when either side ends the session; 1 (with one line on stderr) when the
daemon cannot be reached or refuses.

Start-up: the bridge starts beside Claude Code's own start and its SessionStart hook, on the
same cores, so it loads what the hook client loads (`_socket`, `_thread`; no `json`, `socket`,
`threading`: ~10 ms of imports, `re` and `enum` among them), and `nmem install` runs it as
`python -I -S .../nmem_client/bridge.py` (no `site`).
"""

import _socket
import _thread
import os
import sys
import time

if __package__ in (None, ""):  # run as a file: make the package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nmem_client import paths, protocol  # noqa: E402
from nmem_client.hook import read_reply  # noqa: E402

CONNECT_TIMEOUT_S = 10.0  # an autostarted daemon listens within ~0.3 s
# Why this long: the daemon imports mcp (~1 s, more on a loaded machine) before it
# answers the first MCP request; the client meanwhile waits on its own timeout.
HANDSHAKE_TIMEOUT_S = 60.0
POLL_S = 0.02
CHUNK = 65536
_ABSENT_ERRNOS = (2, 61, 111)  # ENOENT, ECONNREFUSED (macOS 61, Linux 111)


class BridgeError(Exception):
    """Why the bridge could not open a session (printed once on stderr)."""


class WrongStore(BridgeError):
    """The daemon that answered serves another NMEM_HOME (issue #37, 1)."""


def _find_root(cwd: str) -> str:
    """The git top-level of `cwd`, else `cwd`: the same rule hooks use (nmemd.capture.project)."""
    home = os.path.normpath(os.path.expanduser("~"))
    start = os.path.normpath(cwd)
    path = start
    while True:
        if os.path.exists(os.path.join(path, ".git")):
            return path if path not in (home, os.path.sep) or path == start else start
        parent = os.path.dirname(path)
        if parent == path:
            return start
        path = parent


def project_dir() -> str | None:
    """`CLAUDE_PROJECT_DIR`, else the git top-level of the working directory, else that directory."""
    env = os.environ.get("CLAUDE_PROJECT_DIR", "")
    if env and os.path.isabs(env):
        return env
    try:
        return _find_root(os.getcwd())
    except OSError:
        return None  # the working directory was deleted: the daemon serves every project


def _json_string(text: str) -> str:
    """`text` as a JSON string (what `json.dumps(text, ensure_ascii=False)` gives, without `json`)."""
    out = text.replace("\\", "\\\\").replace('"', '\\"')
    if any(c < " " for c in out):
        out = "".join(c if c >= " " else f"\\u{ord(c):04x}" for c in out)
    return f'"{out}"'


def request_body(project: str | None) -> bytes:
    """`{"project": ...}`; a path that is not valid UTF-8 cannot name a project, so it becomes null."""
    if project is None:
        return b'{"project": null}'
    try:
        return ('{"project": ' + _json_string(project) + "}").encode("utf-8")
    except UnicodeEncodeError:
        return b'{"project": null}'


def connect(deadline: float, *, store_lock: bool = True) -> _socket.socket:
    """Connect to the daemon, starting it once when it is absent, until `deadline` (`store_lock`: try
    the socket the store's lock names when nothing listens at ours)."""
    path = paths.socket_path()
    autostart = os.environ.get("NMEM_AUTOSTART", "1") != "0"
    started = False
    if not paths.trusted_socket(path):
        raise BridgeError(f"refusing {path}: not a socket of this user's in a folder only this user controls")
    while True:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError as exc:
            sock.close()
            other = paths.store_socket() if exc.errno in _ABSENT_ERRNOS and store_lock else None
            if other and other != path:  # the store's daemon serves another socket (another environment)
                sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
                try:
                    sock.connect(other)
                    return sock
                except OSError:
                    sock.close()
            if exc.errno not in _ABSENT_ERRNOS:
                raise BridgeError(f"cannot connect to nmemd at {path}: {exc}") from None
            if not autostart:
                raise BridgeError(f"nmemd is not running at {path} (NMEM_AUTOSTART=0)") from None
            if not started:
                from nmem_client import inbox  # sqlite3 is paid only when the daemon must be started

                inbox.start_daemon()
                started = True
            if time.monotonic() >= deadline:
                raise BridgeError(f"nmemd did not start listening at {path} within {CONNECT_TIMEOUT_S:.0f} s") from None
        time.sleep(POLL_S)  # the poll interval of a bounded wait for the daemon's socket


def open_session(sock: _socket.socket, project: str | None) -> bytes:
    """Send the `mcp` request and read the daemon's OK; return bytes that came after it."""
    sock.settimeout(HANDSHAKE_TIMEOUT_S)
    try:
        sock.sendall(
            protocol.encode_request(protocol.KIND_MCP, protocol.NO_EVENT_ID, request_body(project), paths.store_id())
        )
        status, reply, rest = read_reply(sock, time.monotonic() + HANDSHAKE_TIMEOUT_S)
    except TimeoutError:
        raise BridgeError(f"nmemd did not answer the MCP request within {HANDSHAKE_TIMEOUT_S:.0f} s") from None
    except OSError as exc:
        raise BridgeError(f"lost the connection to nmemd: {exc}") from None
    if status != b"OK":
        refusal = WrongStore if reply.startswith(protocol.ERR_WRONG_STORE + b" ") else BridgeError
        raise refusal("nmemd refused the MCP session: " + reply.decode("utf-8", "replace"))
    sock.settimeout(None)
    return rest


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _stdin_to_socket(sock: _socket.socket) -> None:
    """Copy stdin to the daemon; on EOF half-close, so the daemon ends the session after its last reply."""
    try:
        while True:
            data = os.read(0, CHUNK)
            if not data:
                break
            sock.sendall(data)
    except OSError:
        pass  # the daemon left: the main thread sees EOF and exits
    finally:
        try:
            sock.shutdown(_socket.SHUT_WR)
        except OSError:
            pass


def pump(sock: _socket.socket, early: bytes) -> int:
    """Relay until the daemon closes; return the exit code."""
    _thread.start_new_thread(_stdin_to_socket, (sock,))  # never joined: main() ends with os._exit
    try:
        if early:
            _write_all(1, early)
        while True:
            data = sock.recv(CHUNK)
            if not data:
                return 0  # the session ended (stdin closed, or the daemon stopped)
            _write_all(1, data)  # unbuffered: each reply line reaches the client as it arrives
    except BrokenPipeError:
        return 0  # the client went away
    except OSError as exc:
        sys.stderr.write(f"nmem-mcp: lost the connection to nmemd: {exc}\n")
        return 1


def run() -> int:
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    try:
        sock = connect(deadline)
        try:
            early = open_session(sock, project_dir())
        except WrongStore:  # reached through a stale store.lock: this store's own daemon, on its own socket
            sock.close()
            sock = connect(deadline, store_lock=False)
            early = open_session(sock, project_dir())
    except BridgeError as exc:
        sys.stderr.write(f"nmem-mcp: {exc}\n")
        return 1
    return pump(sock, early)


USAGE = """usage: nmem-mcp

A stdio MCP server for any MCP client: a byte pump between stdin/stdout and nmemd's MCP
server (starting nmemd when none runs). Tools: search, timeline, get_observations,
recent_context, sessions, file_history, scoped to CLAUDE_PROJECT_DIR or the git top-level
of the current directory. Register it with `nmem install`, or e.g.
`claude mcp add nmem -- /abs/path/nmem-mcp`.
"""


def main() -> None:
    """Console-script entry point."""
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        sys.stdout.flush()
        os._exit(0)
    try:
        code = run()
    except KeyboardInterrupt:
        code = 130
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)  # never wait for the stdin thread parked in read()


if __name__ == "__main__":
    main()
