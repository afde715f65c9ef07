"""A throwaway PostgreSQL cluster for the team-memory tests and benches.

`initdb` and `pg_ctl` in a temporary folder, listening on 127.0.0.1 at a free port (plus a Unix
socket in that folder), run as the `postgres` system user when we are root (both refuse root).
Local socket connections are trusted; TCP ones need a SCRAM password, so members' logins and a
wrong password are tested for real. Tests get it through the `pg_cluster` (session) and `pg_db`
(a fresh database per test) fixtures in tests/conftest.py; benches call `Cluster` directly.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REQUIRE_ENV = "NMEM_REQUIRE_POSTGRES"
SERVER_USER = "postgres"  # the system user the server runs as when we are root
SUPERUSER = "postgres"  # the cluster's superuser (initdb -U)
START_TIMEOUT_S = 60


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path)) or (0,)


def find_bindir() -> Path | None:
    """The folder with `initdb`, `pg_ctl` and `postgres`: PATH's `pg_ctl` first (resolved, since
    Debian's /usr/bin entries may be wrappers), else the newest /usr/lib/postgresql/*/bin."""
    candidates: list[Path] = []
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
        candidates.append(Path(on_path).parent)
    candidates += [
        Path(p).parent for p in sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=_version_key, reverse=True)
    ]
    for bindir in candidates:
        if all(os.access(bindir / name, os.X_OK) for name in ("initdb", "pg_ctl", "postgres")):
            return bindir
    return None


def runuser() -> str | None:
    """`runuser`, which lives in sbin: a PATH without sbin (`env -i`, a user's shell) still finds it."""
    return shutil.which("runuser") or shutil.which("runuser", path="/usr/sbin:/sbin:/usr/bin:/bin")


def unavailable() -> str | None:
    """Why no test cluster can start here, or None when one can."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]' or 'nmem-agent-memory[team]')"
    if find_bindir() is None:
        return "no PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH or in /usr/lib/postgresql/*/bin"
    if os.geteuid() == 0:
        if runuser() is None:
            return "running as root without runuser: initdb and pg_ctl refuse root"
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"running as root and no {SERVER_USER!r} system user to run the server as"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Cluster:
    """One PostgreSQL cluster in its own temporary folder; `start` runs initdb the first time."""

    bindir: Path
    settings: dict[str, str] = field(default_factory=dict)  # extra `-c name=value` server settings
    root: Path = field(init=False)
    port: int = field(init=False, default=0)
    password: str = field(init=False, default_factory=lambda: secrets.token_urlsafe(18))  # the superuser's
    host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="nmem-pg-", dir="/tmp"))
        self.root.chmod(0o700)
        if os.geteuid() == 0:
            ids = pwd.getpwnam(SERVER_USER)
            os.chown(self.root, ids.pw_uid, ids.pw_gid)

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    @property
    def logfile(self) -> Path:
        return self.root / "server.log"

    def _run(self, *argv: str, timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """Run a server binary, as `postgres` when we are root."""
        cmd = [str(self.bindir / argv[0]), *argv[1:]]
        if os.geteuid() == 0:
            cmd = [runuser() or "runuser", "-u", SERVER_USER, "--", *cmd]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C.UTF-8"
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=self.root)

    def _init(self) -> None:
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            ids = pwd.getpwnam(SERVER_USER)
            os.chown(pwfile, ids.pw_uid, ids.pw_gid)
        pwfile.chmod(0o600)
        try:
            done = self._run(
                "initdb",
                "-D",
                str(self.datadir),
                "-U",
                SUPERUSER,
                "--pwfile",
                str(pwfile),
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            )
        finally:
            pwfile.unlink()
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip() or done.stdout.strip()}")
        self.socket_dir.mkdir(mode=0o700)
        if os.geteuid() == 0:
            ids = pwd.getpwnam(SERVER_USER)
            os.chown(self.socket_dir, ids.pw_uid, ids.pw_gid)

    def start(self) -> None:
        """Start the server (initdb first if needed) and wait until it accepts connections.
        A port taken between choosing and binding is retried with another."""
        if not self.datadir.exists():
            self._init()
        settings = {
            "listen_addresses": self.host,
            "fsync": "off",  # a test cluster: the OS never crashes under it
            "full_page_writes": "off",
            "unix_socket_permissions": "0777",
            **self.settings,
        }
        for _attempt in range(5):
            port = self.port or free_port()
            opts = f"-p {port} -k {self.socket_dir} " + " ".join(f"-c {k}={v}" for k, v in settings.items())
            done = self._run(
                "pg_ctl", "start", "-w", "-t", str(START_TIMEOUT_S), "-D", str(self.datadir), "-l", str(self.logfile),
                "-o", opts,
            )  # fmt: skip
            if done.returncode == 0:
                self.port = port
                return
            log = self.logfile.read_text(errors="replace") if self.logfile.exists() else ""
            if "could not bind" not in log and "already in use" not in log:
                break
            self.port = 0
        tail = "\n".join(log.splitlines()[-15:])
        raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()}\n{tail}")

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server (`immediate`: no checkpoint, like a crash; recovery on the next start)."""
        if (self.datadir / "postmaster.pid").exists():
            self._run("pg_ctl", "stop", "-D", str(self.datadir), "-m", mode, "-w", "-t", str(START_TIMEOUT_S))

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def dsn(self, dbname: str = "postgres", user: str = SUPERUSER, password: str | None = None) -> str:
        """A libpq DSN over TCP; the superuser's password is filled in when `user` is the superuser."""
        if password is None and user == SUPERUSER:
            password = self.password
        parts = {"host": self.host, "port": str(self.port), "dbname": dbname, "user": user, "connect_timeout": "10"}
        if password is not None:
            parts["password"] = password
        from psycopg.conninfo import make_conninfo

        return make_conninfo(**parts)

    def execute(self, sql: str, params: Any = None, dbname: str = "postgres") -> list[tuple[Any, ...]]:
        """Run one statement as the superuser (autocommit) and return its rows, if any."""
        import psycopg

        with psycopg.connect(self.dsn(dbname), autocommit=True) as conn:
            cur = conn.execute(sql, params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    @contextmanager
    def database(self) -> Iterator[Database]:
        """A fresh database owned by a fresh CREATEROLE (non-superuser) admin role, as on a managed
        service; dropped afterwards with every role created meanwhile."""
        roles_before = {r for (r,) in self.execute("SELECT rolname FROM pg_roles")}
        name = f"t_{secrets.token_hex(6)}"
        admin = f"{name}_admin"
        admin_password = secrets.token_urlsafe(18)
        from psycopg import sql

        self.execute(
            sql.SQL("CREATE ROLE {} LOGIN CREATEROLE PASSWORD {}").format(  # type: ignore[arg-type]
                sql.Identifier(admin), sql.Literal(admin_password)
            )
        )
        self.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(admin)))  # type: ignore[arg-type]
        try:
            yield Database(self, name, admin, admin_password)
        finally:
            self.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))  # type: ignore[arg-type]
            created = {r for (r,) in self.execute("SELECT rolname FROM pg_roles")} - roles_before
            for role in sorted(created, key=lambda r: r == admin):  # the admin last: it may own the others' grants
                self.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))  # type: ignore[arg-type]


@dataclass
class Database:
    """One database of a test cluster and its admin (owner, CREATEROLE, not a superuser)."""

    cluster: Cluster
    name: str
    admin: str
    admin_password: str

    @property
    def admin_dsn(self) -> str:
        return self.cluster.dsn(self.name, self.admin, self.admin_password)

    @property
    def superuser_dsn(self) -> str:
        return self.cluster.dsn(self.name)

    def dsn(self, user: str, password: str) -> str:
        return self.cluster.dsn(self.name, user, password)

    def execute(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement in this database as the superuser (RLS does not apply to it)."""
        return self.cluster.execute(sql, params, dbname=self.name)


def start_cluster(**settings: str) -> Cluster:
    """A started cluster (the caller destroys it); RuntimeError, with the reason, where none can start."""
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    bindir = find_bindir()
    assert bindir is not None
    cluster = Cluster(bindir, settings=settings)
    try:
        cluster.start()
    except BaseException:
        cluster.destroy()
        raise
    return cluster


@contextmanager
def running_cluster(**settings: str) -> Iterator[Cluster]:
    """A started cluster, stopped (`-m immediate`) and removed at the end; RuntimeError where
    none can start (the message says why)."""
    cluster = start_cluster(**settings)
    try:
        yield cluster
    finally:
        cluster.destroy()
