"""Shared fixtures: isolated NMEM_HOME, short socket paths, a real nmemd subprocess."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pg_cluster as pgc
import pytest
from fixtures import SHARED
from helpers import umask_kept

from nmem_client import fallback
from nmemd.store import fts

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SEND_SCRIPT = REPO / "nmem_client" / "send.py"
READY_TIMEOUT_S = 20.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def short_dir() -> Iterator[str]:
    """A directory under /tmp short enough for AF_UNIX paths (pytest's tmp_path is not)."""
    path = tempfile.mkdtemp(prefix="nm", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


UNSET_FOR_TESTS = ("XDG_RUNTIME_DIR", "NMEM_TIMEOUT_MS", "NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID")


@pytest.fixture(autouse=True)
def nmem_env(tmp_path: Path, short_dir: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Point every nmem path at this test's own directories."""
    env = isolated_env(tmp_path, short_dir)
    for key in UNSET_FOR_TESTS:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield env
    remove_fallbacks(env["NMEM_HOME"], str(tmp_path), short_dir)


def isolated_env(tmp_path: Path, short_dir: str) -> dict[str, str]:
    """NMEM_* and every agent's folders in `tmp_path`, the socket in `short_dir` (nmem_env's, or a
    module fixture's own)."""
    home = tmp_path / "home"
    env = {
        "NMEM_HOME": str(home),
        "NMEM_SOCKET": os.path.join(short_dir, "run", "nmemd.sock"),
        "COPILOT_HOME": str(tmp_path / "copilot"),  # never the user's ~/.copilot
        "NMEM_CURSOR_DIR": str(tmp_path / "cursor"),  # never the user's ~/.cursor
        "NMEM_CLINE_HOOKS_DIR": str(tmp_path / "cline" / "Hooks"),  # never the user's ~/Documents/Cline
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),  # never the user's ~/.config/opencode
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),  # nor ~/.local/share/opencode (nmem's own: NMEM_HOME)
    }
    return env


def remove_fallbacks(home: str, *roots: str) -> None:
    """Events a client kept outside an unusable NMEM_HOME (nmem_client.fallback) for this test's
    homes: its NMEM_HOME's folder, and any whose reason names a path of this test's."""
    for folder in fallback.candidates(home):
        shutil.rmtree(folder, ignore_errors=True)
    for base in {os.path.dirname(f) for f in fallback.candidates(home)}:
        for reason in Path(base).glob(f"*/{fallback.REASON}"):
            try:
                text = reason.read_text(errors="replace")
            except OSError:
                continue
            if any(root + "/" in text for root in roots):
                shutil.rmtree(reason.parent, ignore_errors=True)


RLIMIT_WRAPPER = (
    "import os, resource, signal, sys\n"
    "for spec in sys.argv[1].split(','):\n"
    "    name, soft, hard = spec.split(':')\n"
    "    resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))\n"
    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class Daemon:
    """A real `nmemd` process; started by `start`, awaited through READY=1 on NOTIFY_SOCKET."""

    def __init__(self, env: dict[str, str], short_dir: str):
        self.env = {**os.environ, **env}
        self.notify_path = os.path.join(short_dir, "notify")
        self.proc: subprocess.Popen[bytes] | None = None
        self.home = Path(env["NMEM_HOME"])
        self.socket = env["NMEM_SOCKET"]

    @property
    def db(self) -> Path:
        return self.home / "nmem.db"

    def start(
        self, *args: str, wait: bool = True, rlimits: dict[str, tuple[int, int]] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start nmemd; `rlimits` ({"RLIMIT_FSIZE": (soft, hard)}) runs it under those limits,
        with SIGXFSZ ignored (a write past RLIMIT_FSIZE then fails with EFBIG instead of killing it)."""
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if os.path.exists(self.notify_path):
            os.unlink(self.notify_path)
        notify.bind(self.notify_path)
        notify.settimeout(READY_TIMEOUT_S)
        env = {**self.env, "NOTIFY_SOCKET": self.notify_path}
        argv = [str(BIN / "nmemd"), *args]
        if rlimits:
            specs = ",".join(f"{name}:{soft}:{hard}" for name, (soft, hard) in rlimits.items())
            argv = [sys.executable, "-c", RLIMIT_WRAPPER, specs, *argv]
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            if wait:
                while True:
                    message = notify.recv(4096)
                    if b"READY=1" in message:
                        break
        except TimeoutError:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"nmemd did not become ready: {err.decode(errors='replace')}") from None
        finally:
            notify.close()
        return self.proc

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.stderr:
                self.proc.stderr.close()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


@pytest.fixture
def keep_umask() -> Iterator[None]:
    """For tests that run many hook clients in threads of this process (helpers.umask_kept)."""
    with umask_kept():
        yield


@pytest.fixture
def daemon(nmem_env: dict[str, str], short_dir: str) -> Iterator[Daemon]:
    d = Daemon(nmem_env, short_dir)
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.stop()
    elif d.proc is not None and d.proc.stderr is not None:
        d.proc.stderr.close()  # a daemon that died: its pipe must not leak into a later test's warnings


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[pgc.Cluster]:
    """A real PostgreSQL cluster for the whole session (tests/pg_cluster.py); tests marked
    `postgres` skip, with the reason, where none can start, or fail where NMEM_REQUIRE_POSTGRES=1."""
    reason = pgc.unavailable()
    cluster = None
    if not reason:
        try:
            cluster = pgc.start_cluster()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            reason = f"no PostgreSQL test cluster could start: {' '.join(str(exc).split())[:400]}"
    if cluster is None:
        if os.environ.get(pgc.REQUIRE_ENV) == "1":
            pytest.fail(f"{pgc.REQUIRE_ENV}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def pg_db(pg_cluster: pgc.Cluster) -> Iterator[pgc.Database]:
    """A fresh database of the session's cluster, owned by its own CREATEROLE admin (no superuser);
    dropped after the test with every role the test created."""
    with pg_cluster.database() as db:
        yield db


def run_send(
    payload: bytes, env: dict[str, str] | None = None, timeout: float = 15.0
) -> subprocess.CompletedProcess[bytes]:
    """Run the hook client exactly as installed hooks do: `python -I -S send.py`."""
    return subprocess.run(
        [sys.executable, "-I", "-S", str(SEND_SCRIPT)],
        input=payload,
        env={**os.environ, **(env or {})},
        capture_output=True,
        timeout=timeout,
    )


def db_rows(db: str | Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return list(conn.execute(sql, params))
    finally:
        conn.close()


def integrity_ok(db: str | Path) -> None:
    """PRAGMA integrity_check and the FTS5 integrity check (rank 1 compares with content).

    The FTS check runs on an in-memory copy (a daemon may be running): the observations
    above the watermark (migration m004) are indexed there first, so the check proves the
    index plus what waits for it is exactly the content, and the file is never written.
    """
    conn = sqlite3.connect(db)
    copy = sqlite3.connect(":memory:")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        dup = conn.execute("SELECT count(*) - count(DISTINCT event_id) FROM events").fetchone()[0]
        assert dup == 0
        conn.backup(copy)
        if copy.execute("SELECT 1 FROM sqlite_master WHERE name = 'fts_state'").fetchone():
            copy.execute(
                f"INSERT INTO observations_fts(rowid, {fts.COLUMNS})"
                f" SELECT id, {fts.COLUMNS} FROM observations"
                " WHERE id >= (SELECT indexed_below FROM fts_state)"
            )
        copy.execute("INSERT INTO observations_fts(observations_fts, rank) VALUES ('integrity-check', 1)")
    finally:
        copy.close()
        conn.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Tests marked `shared` run over the real captures beside the repository, which a user's clone
    # has not: skipped there, with the reason. .ci/run sets NMEM_REQUIRE_SHARED where they exist,
    # so there they can never be skipped silently.
    # Tests marked `claude_code` run the real Claude Code binary; .ci/run sets NMEM_REQUIRE_CLAUDE
    # when it installed it, so there a missing binary is an error, never a skip.
    if os.environ.get("NMEM_REQUIRE_CLAUDE") == "1" and not os.access(os.environ.get("NMEM_CLAUDE_BIN", ""), os.X_OK):
        raise pytest.UsageError("NMEM_REQUIRE_CLAUDE=1 but NMEM_CLAUDE_BIN is not an executable Claude Code binary")
    if os.environ.get("NMEM_REQUIRE_CODEX") == "1" and not os.access(os.environ.get("NMEM_CODEX_BIN", ""), os.X_OK):
        raise pytest.UsageError("NMEM_REQUIRE_CODEX=1 but NMEM_CODEX_BIN is not an executable Codex CLI binary")
    if os.environ.get("NMEM_REQUIRE_GEMINI") == "1" and not os.access(os.environ.get("NMEM_GEMINI_BIN", ""), os.X_OK):
        raise pytest.UsageError("NMEM_REQUIRE_GEMINI=1 but NMEM_GEMINI_BIN is not an executable Gemini CLI")
    if os.environ.get("NMEM_REQUIRE_COPILOT") == "1" and not os.access(os.environ.get("NMEM_COPILOT_BIN", ""), os.X_OK):
        raise pytest.UsageError("NMEM_REQUIRE_COPILOT=1 but NMEM_COPILOT_BIN is not an executable Copilot CLI")
    if os.environ.get("NMEM_REQUIRE_CLINE") == "1" and not os.access(os.environ.get("NMEM_CLINE_BIN", ""), os.X_OK):
        raise pytest.UsageError("NMEM_REQUIRE_CLINE=1 but NMEM_CLINE_BIN is not an executable Cline CLI")
    opencode = os.environ.get("NMEM_OPENCODE_BIN", "")
    if os.environ.get("NMEM_REQUIRE_OPENCODE") == "1" and not os.access(opencode, os.X_OK):
        raise pytest.UsageError("NMEM_REQUIRE_OPENCODE=1 but NMEM_OPENCODE_BIN is not an executable OpenCode")
    if os.environ.get("NMEM_REQUIRE_BROWSER") == "1" and not (
        os.environ.get("NMEM_CHROMIUM") or shutil.which("chromium")
    ):
        raise pytest.UsageError("NMEM_REQUIRE_BROWSER=1 but no chromium is on PATH (nor NMEM_CHROMIUM)")
    if SHARED.is_dir():
        return
    if os.environ.get("NMEM_REQUIRE_SHARED") == "1":
        raise pytest.UsageError(f"NMEM_REQUIRE_SHARED=1 but {SHARED} does not exist")
    skip = pytest.mark.skip(reason=f"needs the real captures in {SHARED} (absent here; .ci/run runs them)")
    for item in items:
        if "shared" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Say why the `shared` tests and those of a real agent or browser were skipped, even under -q."""
    for marker in ("claude_code", "codex", "gemini", "copilot", "opencode", "cline", "browser", "postgres"):
        missed = [r for r in terminalreporter.stats.get("skipped", []) if marker in r.keywords]
        if missed:
            reason = str(missed[0].longrepr[-1]) if isinstance(missed[0].longrepr, tuple) else "see -rs"
            terminalreporter.write_line(
                f"{len(missed)} tests marked `{marker}` skipped: {reason.removeprefix('Skipped: ')}"
            )
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "shared" in r.keywords]
    if skipped and not SHARED.is_dir():
        terminalreporter.write_line(
            f"{len(skipped)} tests marked `shared` skipped: they read the real captures in {SHARED},"
            " which is not beside this clone (.ci/run runs them where it is)"
        )
