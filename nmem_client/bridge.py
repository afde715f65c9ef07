"""nmem-mcp: connects a stdio MCP client (Claude Code) to the MCP server inside nmemd.

A byte pump, stdlib only: `import mcp` costs ~1 s and belongs in the daemon,
which already holds the database. The bridge connects to the daemon's socket
(starting the daemon when it is absent), asks for an MCP session scoped to the
caller's project, then copies stdin to the socket and the socket to stdout.
Framing is the daemon's business: both sides speak one JSON-RPC message per line.

But for the handshake: a client offers a server's tools only once it is answered, and
neither Codex (about a second) nor Claude Code (not at all) waits for that as long as a
daemon start and its mcp import take on a busy machine. So the bridge answers it itself,
at once, with the daemon's own answers as nmem ships them (`mcp_handshake.json`,
nmemd/mcp/handshake.py), while the daemon session opens: a legacy `initialize` and
`tools/list` (Codex), or 2026-07-28 `server/discover`, the three lists and the
acknowledgement of `subscriptions/listen` (Claude Code). The client's other lines wait
for the daemon, behind the bridge's own `initialize` in a legacy session; what the
daemon answers that the bridge already did (that `initialize`, the acknowledgement)
the client never sees twice.

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
# A daemon still opening its store (a migration indexing it again: ~40 s a million observations here) says
# `busy starting` to a session it held 20 s (nmemd/daemon/starting.py); the bridge asks again until then.
STARTING_WAIT_S = 1800.0
POLL_S = 0.02
CHUNK = 65536
_ABSENT_ERRNOS = (2, 61, 111)  # ENOENT, ECONNREFUSED (macOS 61, Linux 111)


class BridgeError(Exception):
    """Why the bridge could not open a session (printed once on stderr)."""


class WrongStore(BridgeError):
    """The daemon that answered serves another NMEM_HOME (issue #37, 1)."""


class StillStarting(BridgeError):
    """The daemon is still opening its store: ask again (`run`)."""


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
        refusal = BridgeError
        if reply.startswith(protocol.ERR_WRONG_STORE + b" "):
            refusal = WrongStore
        elif reply.startswith(protocol.BUSY_STARTING):
            refusal = StillStarting
        raise refusal("nmemd refused the MCP session: " + reply.decode("utf-8", "replace"))
    sock.settimeout(None)
    return rest


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# --- the handshake, answered here (nmemd/mcp/handshake.py says why) ----------------------------------------

HANDSHAKE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcp_handshake.json")
# The id of the `initialize` the bridge sends the daemon for the client (the client's own was answered here).
OWN_INIT_ID = "nmem-mcp-initialize"
_OWN_INIT_MARK = b'"' + OWN_INIT_ID.encode() + b'"'
_ACK_MARK = b'"notifications/subscriptions/acknowledged"'
_ID_MAX = 2**63 - 1  # the daemon refuses ids past a signed 64-bit integer (nmemd.mcp.transport)


ENVELOPE_VERSION = "io.modelcontextprotocol/protocolVersion"  # a 2026-07-28 request's version, in its `_meta`


class Handshake:
    """The daemon's answers as nmem ships them: to the legacy `initialize` (but its `protocolVersion`) and
    `tools/list`; to the 2026-07-28 requests a client sends before it offers the tools (`modern`: by version,
    by method)."""

    def __init__(self, versions: list[str], latest: str, initialize: dict[str, object], tools: dict[str, object]):
        self.versions, self.latest, self.initialize, self.tools = versions, latest, initialize, tools
        self.modern: dict[str, dict[str, object]] = {}


def load_handshake() -> Handshake | None:
    """The shipped handshake, or None (then the daemon answers it itself, later)."""
    import json

    try:
        with open(HANDSHAKE_FILE, "rb") as f:
            data = json.loads(f.read())
        versions, latest = list(data["versions"]), str(data["latest"])
        found = Handshake(versions, latest, dict(data["initialize"]), dict(data["tools/list"]))
        found.modern = {str(version): dict(results) for version, results in dict(data.get("modern", {})).items()}
        return found
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _request(line: bytes, method: str | None = None) -> dict[str, object] | None:
    """`line` when it is a JSON-RPC request (for `method`, if given) with an id the daemon would accept."""
    import json

    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or not isinstance(msg.get("method"), str):
        return None
    if method is not None and msg["method"] != method:
        return None
    rid = msg.get("id")
    if isinstance(rid, str) or (type(rid) is int and -_ID_MAX - 1 <= rid <= _ID_MAX):
        return msg
    return None


def modern_version(msg: dict[str, object]) -> object:
    """The 2026-07-28 protocol version a request names in its `_meta` (None for a legacy one)."""
    params = msg.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get(ENVELOPE_VERSION) if isinstance(meta, dict) else None


def _reply(rid: object, result: dict[str, object]) -> bytes:
    import json

    return json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}, separators=(",", ":")).encode() + b"\n"


def local_initialize(line: bytes, handshake: Handshake) -> tuple[bytes, bytes] | None:
    """For a well-formed legacy `initialize`: the reply for the client, and the `initialize` for the daemon
    (at the version negotiated here, under the bridge's own id). None: the daemon answers this line."""
    import json

    msg = _request(line, "initialize")
    params = msg.get("params") if msg else None
    if msg is None or not isinstance(params, dict) or not isinstance(params.get("capabilities"), dict):
        return None
    info, asked = params.get("clientInfo"), params.get("protocolVersion")
    if not (isinstance(info, dict) and isinstance(info.get("name"), str) and isinstance(info.get("version"), str)):
        return None
    if not isinstance(asked, str):
        return None
    version = asked if asked in handshake.versions else handshake.latest  # the SDK's negotiation
    reply = _reply(msg["id"], {**handshake.initialize, "protocolVersion": version})
    params = {**params, "protocolVersion": version}
    own = {"jsonrpc": "2.0", "id": OWN_INIT_ID, "method": "initialize", "params": params}
    return reply, json.dumps(own, separators=(",", ":")).encode() + b"\n"


def local_tools_list(line: bytes, handshake: Handshake) -> bytes | None:
    """The reply to a first-page `tools/list` (nmem's six tools fit one page), else None."""
    msg = _request(line, "tools/list")
    params = msg.get("params", {}) if msg else None
    if msg is None or not isinstance(params, dict) or params.get("cursor") is not None:
        return None
    return _reply(msg["id"], handshake.tools)


def local_modern(msg: dict[str, object], handshake: Handshake) -> bytes | None:
    """The reply to a 2026-07-28 request the shipped handshake answers (a list's first page), else None."""
    version = modern_version(msg)
    results = handshake.modern.get(version) if isinstance(version, str) else None
    result = results.get(str(msg["method"])) if results else None
    params = msg.get("params")
    if not isinstance(result, dict) or not isinstance(params, dict) or params.get("cursor") is not None:
        return None
    return _reply(msg["id"], result)


ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
_LIST_CHANGES = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")


def local_ack(msg: dict[str, object]) -> bytes | None:
    """For a `subscriptions/listen`: its acknowledgement as the daemon's server sends it first (every kind
    asked for is honored, mcp's `_honored_subset`; nmem never changes its lists), else None."""
    import json

    params = msg.get("params")
    asked = params.get("notifications") if isinstance(params, dict) else None
    if msg["method"] != "subscriptions/listen" or not isinstance(asked, dict):
        return None
    uris = asked.get("resourceSubscriptions")
    if uris is not None and not (isinstance(uris, list) and all(isinstance(u, str) for u in uris)):
        return None
    honored: dict[str, object] = {key: True for key in _LIST_CHANGES if asked.get(key)}
    if uris:
        honored["resourceSubscriptions"] = uris
    note = {
        "jsonrpc": "2.0",
        "method": ACKNOWLEDGED,
        "params": {"_meta": {SUBSCRIPTION_ID: msg["id"]}, "notifications": honored},
    }
    return json.dumps(note, separators=(",", ":")).encode() + b"\n"


# The client's lines: the first one not seen yet; a legacy handshake answered here; a 2026-07-28 session
# (each request names its version) answered here; bytes. The middle two until the daemon's session is open.
FIRST, LEGACY, MODERN, PUMP = 0, 1, 2, 3


class Relay:
    """Both directions of one session. Until the daemon's session is open, the client's lines wait in
    `queue`, a legacy `initialize` and `tools/list` answered here; then it is a byte pump both ways, but
    for the daemon's reply to the bridge's own `initialize`, which the client must not see."""

    def __init__(self) -> None:
        self.lock = _thread.allocate_lock()  # sock, queue, eof: what the client wrote reaches the daemon in order
        self.out_lock = _thread.allocate_lock()  # whole lines on stdout, from either thread
        self.sock: _socket.socket | None = None
        self.queue: list[bytes] = []
        self.eof = False
        self.phase = FIRST
        self.handshake: Handshake | None = None
        self.own_init_pending = True  # until known that no own `initialize` went (or its reply came back)
        self.acked: set[object] = set()  # subscriptions acknowledged here whose daemon's acknowledgement is due

    # the client -> the daemon (the stdin thread)

    def read_client(self) -> None:
        """Copy stdin to the daemon; on EOF half-close, so the daemon ends the session after its last reply."""
        rest = b""
        try:
            while True:
                data = os.read(0, CHUNK)
                if not data:
                    break
                rest = self._from_client(rest + data)
        except OSError:
            pass  # the daemon left: the main thread sees EOF and exits
        finally:
            with self.lock:
                self.eof = True
                try:
                    self._send_locked(rest)  # a last line without its newline
                except OSError:
                    pass  # the daemon left: the main thread sees EOF and exits
                if self.sock is not None:
                    self._half_close()

    def _from_client(self, data: bytes) -> bytes:
        """Handle what the client wrote; return the start of a line still to come."""
        while self.phase == FIRST or (self.phase in (LEGACY, MODERN) and self.sock is None):
            end = data.find(b"\n")
            if end < 0:
                return data
            line, data = data[: end + 1], data[end + 1 :]
            self._line(line)
        self._send(data)
        return b""

    def _line(self, line: bytes) -> None:
        if self.phase == FIRST:
            self.handshake = load_handshake()
            if self.handshake is None:
                self.phase, self.own_init_pending = PUMP, False
                self._send(line)
            else:
                self.phase = self._first(line, self.handshake)
            return
        listed = None
        if self.phase == LEGACY and self.handshake is not None:
            listed = local_tools_list(line, self.handshake)
        elif self.phase == MODERN and self.handshake is not None:
            msg = _request(line)
            if msg is not None:
                self._modern(line, msg, self.handshake)
                return
        if listed is None:
            self._send(line)
        else:
            self.write(listed)

    def _modern(self, line: bytes, msg: dict[str, object], handshake: Handshake) -> None:
        """A 2026-07-28 request: answered here, acknowledged here and sent on, or sent on."""
        listed = local_modern(msg, handshake)
        if listed is not None:
            self.write(listed)
            return
        ack = local_ack(msg)
        if ack is not None:
            self.acked.add(msg["id"])  # before the daemon can see the request: its acknowledgement is dropped
            self.write(ack)
        self._send(line)

    def _first(self, line: bytes, handshake: Handshake) -> int:
        """Handle the client's first line; the phase it starts."""
        answered = local_initialize(line, handshake)
        if answered is not None:
            reply, own = answered
            self.write(reply)
            self._send(own)
            return LEGACY
        self.own_init_pending = False
        msg = _request(line)
        if msg is None or modern_version(msg) not in handshake.modern:
            self._send(line)
            return PUMP
        self._modern(line, msg, handshake)
        return MODERN

    def _send(self, data: bytes) -> None:
        with self.lock:
            self._send_locked(data)

    def _send_locked(self, data: bytes) -> None:
        if not data:
            return
        if self.sock is None:
            self.queue.append(data)
        else:
            self.sock.sendall(data)

    def _half_close(self) -> None:
        assert self.sock is not None
        try:
            self.sock.shutdown(_socket.SHUT_WR)
        except OSError:
            pass

    def attach(self, sock: _socket.socket) -> None:
        """The daemon's session is open: send it what waited, then pump."""
        with self.lock:
            try:
                for data in self.queue:
                    sock.sendall(data)
            except OSError:
                pass  # the daemon left: pump() sees EOF
            self.queue.clear()
            self.sock = sock
            if self.eof:
                self._half_close()

    # the daemon -> the client (the main thread)

    def write(self, data: bytes) -> None:
        with self.out_lock:
            _write_all(1, data)

    def pump(self, sock: _socket.socket, early: bytes) -> int:
        """Relay until the daemon closes; return the exit code."""
        rest = early
        try:
            while True:
                if rest:
                    rest = self._deliver(rest)
                data = sock.recv(CHUNK)
                if not data:
                    if rest:
                        self.write(rest)
                    return 0  # the session ended (stdin closed, or the daemon stopped)
                rest += data
        except BrokenPipeError:
            return 0  # the client went away
        except OSError as exc:
            sys.stderr.write(f"nmem-mcp: lost the connection to nmemd: {exc}\n")
            return 1

    def _deliver(self, data: bytes) -> bytes:
        """Write the daemon's bytes to the client (unbuffered: each reply as it arrives) but what the bridge
        already answered (the reply to its own `initialize`, an acknowledgement sent here); return the start
        of a line still to come while one of those is awaited."""
        if not self.own_init_pending and not self.acked:
            self.write(data)
            return b""
        end = data.rfind(b"\n") + 1
        for line in data[:end].split(b"\n")[:-1]:
            if not self._answered_here(line):
                self.write(line + b"\n")
        if self.own_init_pending or self.acked:
            return data[end:]
        self.write(data[end:])
        return b""

    def _answered_here(self, line: bytes) -> bool:
        """Whether `line` is the daemon's copy of what the client already got from the bridge."""
        import json

        own = self.own_init_pending and _OWN_INIT_MARK in line
        if not own and not (self.acked and _ACK_MARK in line):
            return False
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            return False
        if not isinstance(msg, dict):
            return False
        if own and msg.get("id") == OWN_INIT_ID and "method" not in msg:
            self.own_init_pending = False
            if msg.get("error") is not None:  # the session cannot work: say why once
                sys.stderr.write(f"nmem-mcp: nmemd refused the session's initialize: {str(msg['error'])[:300]}\n")
            return True
        params = msg.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        sub = meta.get(SUBSCRIPTION_ID) if isinstance(meta, dict) else None
        if msg.get("method") == ACKNOWLEDGED and sub in self.acked:
            self.acked.discard(sub)
            return True
        return False


def run() -> int:
    relay = Relay()
    _thread.start_new_thread(relay.read_client, ())  # never joined: main() ends with os._exit
    starting_until = time.monotonic() + STARTING_WAIT_S
    try:
        while True:
            try:
                sock, early = _session(time.monotonic() + CONNECT_TIMEOUT_S)
                break
            except StillStarting:
                if time.monotonic() >= starting_until:
                    raise BridgeError(f"nmemd was still opening its store after {STARTING_WAIT_S:.0f} s") from None
                time.sleep(POLL_S)  # the daemon held the last ask for 20 s: a pause, then the next
    except BridgeError as exc:
        sys.stderr.write(f"nmem-mcp: {exc}\n")
        return 1
    relay.attach(sock)
    return relay.pump(sock, early)


def _session(deadline: float) -> tuple[_socket.socket, bytes]:
    """A connection with its MCP session open, and the bytes that came after the daemon's OK."""
    try:
        return _opened(connect(deadline))
    except WrongStore:  # reached through a stale store.lock: this store's own daemon, on its own socket
        return _opened(connect(deadline, store_lock=False))


def _opened(sock: _socket.socket) -> tuple[_socket.socket, bytes]:
    """`sock` with its MCP session open (`open_session`); closed when that fails."""
    try:
        return sock, open_session(sock, project_dir())
    except BridgeError:
        sock.close()
        raise


USAGE = """usage: nmem-mcp

A stdio MCP server for any MCP client: a byte pump between stdin/stdout and nmemd's MCP
server (starting nmemd when none runs); it answers the handshake itself, at once. Tools:
search, timeline, get_observations, recent_context, sessions, file_history, scoped to
CLAUDE_PROJECT_DIR or the git top-level of the current directory. Register it with
`nmem install`, or e.g. `claude mcp add nmem -- /abs/path/nmem-mcp`.
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
