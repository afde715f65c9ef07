"""`nmem doctor`: check the install end to end and say, for each problem, the command that fixes it.

Every check only reads: settings files, the socket directory, the database
(read-only), the service manager's unit files. A check that cannot tell is a
warning, never a crash. `fail` means memory is not being captured or kept
safely (the command exits 1); `warn` means something is worth a look
(a daemon not running yet is normal: the first hook starts it).
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from nmem_client import paths
from nmemd import DISTRIBUTION, __version__, config, registry
from nmemd.config import Settings, load
from nmemd.control import control
from nmemd.daemon.instance import lock_holder, socket_dir_is_ours, startup_problem
from nmemd.errors import NmemError
from nmemd.setup import settings_file
from nmemd.setup.checks import Check, command_paths, fail, home_tilde, ok, warn
from nmemd.store import readers
from nmemd.store.checkpointer import WAL_TRUNCATE_BYTES
from nmemd.store.migrations import MIGRATIONS

ENTRY_POINTS = ("nmem", "nmemd", "nmem-send", "nmem-mcp")
STALE_BACKLOG_S = 120.0  # the daemon drains every few seconds: older waiting events mean it does not
SUN_PATH_MAX = 104  # macOS; Linux allows 108
SYSTEMCTL_TIMEOUT_S = 5.0


class Report(msgspec.Struct, kw_only=True):
    ok: bool  # no check failed
    checks: list[Check]


OWN_SOCKET = "/tmp/nmem-$(id -u)/nmemd.sock"


def _private(path: str) -> str | None:
    """Why `path` is not ours alone (None: fine)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink"
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}, not by us"
    if st.st_mode & 0o077:
        return f"{path} is mode {stat.S_IMODE(st.st_mode):o}: others can reach it"
    return None


# --- checks --------------------------------------------------------------------------------------


def check_config() -> tuple[Check, Settings]:
    """The effective config; what cannot be used of it fails the check, the rest is what the daemon
    runs on (the other checks run on it too), and a FIFO there never hangs (issue #31, item 3)."""
    settings, _, problems = config.load_checked()
    target = Path(config.config_path(settings.home))
    if problems:
        fix = (
            f"edit {target} or the NMEM_* variable it names (until then nmemd runs without it), then: nmem config show"
        )
        return fail("config", "; ".join(problems), fix), settings
    if notes := config.retired_notes(settings.home):
        return warn("config", "; ".join(notes), f"remove it from {target} or the environment"), settings
    if target != Path(config.xdg_config_path()):  # the old place: still read, and said
        return warn("config", config.config_note(settings.home), f"mv {target} {config.xdg_config_path()}"), settings
    return ok("config", str(target) if target.exists() else "defaults (no config.toml)"), settings


def _reinstall_command() -> str:
    source = settings_file.install_root()
    spec = shlex.quote(str(source)) if (source / "pyproject.toml").exists() else DISTRIBUTION
    editable = "-e " if (source / "pyproject.toml").exists() else ""
    return f"{shlex.quote(sys.executable)} -m pip install --force-reinstall --no-deps {editable}{spec}"


def check_entry_points(bin_dir: str | None = None) -> Check:
    """The executables hooks, services and MCP clients call, beside this Python."""
    where = bin_dir or os.path.dirname(os.path.abspath(sys.executable))
    missing = [n for n in ENTRY_POINTS if not os.access(os.path.join(where, n), os.X_OK)]
    client = settings_file.install_root() / settings_file.CLIENT_MARKER
    if not client.exists():
        missing.append(str(client))
    if missing:
        return fail("entry points", f"missing in {where}: {', '.join(missing)}", _reinstall_command())
    return ok("entry points", f"{', '.join(ENTRY_POINTS)} in {where}")


def check_path(bin_dir: str | None = None) -> Check:
    """The `nmem` a shell runs is this one: `nmem` on the package index is another project, whose
    command has the same name, and a second installation of ours would talk to the same store."""
    where = bin_dir or os.path.dirname(os.path.abspath(sys.executable))
    here = os.path.join(where, "nmem")
    found = shutil.which("nmem")
    if found is None:  # a venv not on PATH: the hooks call this one by its path, all is well
        return ok("path", f"nmem is not on PATH; this one is {home_tilde(here)}")
    if os.path.realpath(found) == os.path.realpath(here):
        return ok("path", f"nmem: {home_tilde(found)}")
    try:
        with open(found, "rb") as f:
            ours = b"nmemd.cli" in f.read(4096)
    except OSError:
        ours = False
    what = "another installation of this nmem" if ours else f"another program called nmem (not {DISTRIBUTION})"
    fix = (f"put {home_tilde(where)} first on PATH, or remove {home_tilde(found)}"
           + ("" if ours else " (the package index's `nmem` is another project: pipx uninstall nmem)"))  # fmt: skip
    return warn("path", f"{home_tilde(found)} comes first on PATH: {what}, not {home_tilde(here)}", fix)


def check_socket(settings: Settings) -> Check:
    sock = settings.socket
    directory = os.path.dirname(sock)
    if len(os.fsencode(sock)) >= SUN_PATH_MAX:
        return fail("socket", f"{sock} is longer than a Unix socket path may be ({SUN_PATH_MAX - 1} bytes)",
                     f"export NMEM_SOCKET={OWN_SOCKET}  # or another short path")  # fmt: skip
    if not os.path.lexists(directory):
        return ok("socket", f"{directory} does not exist yet: the daemon creates it 0700")
    ours = socket_dir_is_ours(sock, settings.home)
    why = paths.own_folder_problem(directory) if ours else paths.given_folder_problem(directory)
    if why:  # the rule the daemon and the hook client apply (issue #16, finding 7)
        mine = os.stat(directory).st_uid == os.geteuid() if os.path.isdir(directory) else False
        fix = f"chmod 700 {shlex.quote(directory)}" if mine else f"export NMEM_SOCKET={OWN_SOCKET}  # a folder of yours"
        return fail("socket", why, fix)
    if os.path.lexists(sock):
        st = os.lstat(sock)
        if not stat.S_ISSOCK(st.st_mode):
            return fail("socket", f"{sock} is not a socket", f"nmem daemon stop; rm {shlex.quote(sock)}")
        why = _private(sock)
        if why:
            return fail("socket", why, f"chmod 600 {shlex.quote(sock)}")
    mode = f"directory {stat.S_IMODE(os.stat(directory).st_mode):o}"
    return ok("socket", f"{sock} ({mode}{', socket 0600' if os.path.exists(sock) else ''})")


def _restart_command(started_by: str | None) -> str:
    """Restart the daemon as this installation: its own `nmem`, or the service unit rewritten for it."""
    nmem = shlex.quote(os.path.join(os.path.dirname(sys.executable), "nmem"))
    if started_by in ("systemd", "launchd"):
        return f"{nmem} service install && {nmem} daemon restart"
    return f"{nmem} daemon restart"


def check_daemon(settings: Settings) -> Check:
    facts = control.ping(timeout=2.0, any_store=True)
    if facts is not None and facts.store is not None and facts.store != paths.store_id(settings.home).decode():
        # A daemon of another NMEM_HOME answers on this socket (a shared NMEM_SOCKET, a stale store.lock):
        # it refuses this store's events, which wait in this store's inbox (issue #37, 1).
        shared = facts.socket == settings.socket  # else reached through this store's stale store.lock
        return fail("daemon", f"the daemon on {facts.socket} (pid {facts.pid}) serves another store, {facts.home},"
                    f" not {settings.home}: it refuses this store's events, which wait in its inbox",
                    "unset NMEM_SOCKET (each NMEM_HOME gets its own socket), then: nmem daemon start" if shared
                    else "nmem daemon start")  # fmt: skip
    if facts is not None:
        detail = f"running, pid {facts.pid}, started by {facts.started_by}, version {facts.version}"
        here = str(settings_file.install_root())
        if facts.package is not None and os.path.realpath(facts.package) != os.path.realpath(here):
            exe = home_tilde(facts.executable or "?")
            return warn("daemon", f"{detail}, from {home_tilde(facts.package)} (python {exe}): not this nmem"
                        f" ({__version__} in {home_tilde(here)})", _restart_command(facts.started_by))  # fmt: skip
        if facts.version != __version__:
            return warn("daemon", f"{detail}; this nmem is {__version__}", _restart_command(facts.started_by))
        if facts.last_error and "disk is full" in facts.last_error:
            return fail("daemon", f"{detail}; last error: disk full ({facts.last_error})",
                        f"free space on the disk holding it: df -h {shlex.quote(settings.home)}")  # fmt: skip
        if facts.last_error:
            return warn("daemon", f"{detail}; last error: {facts.last_error}", f"see {settings.log_dir}/nmemd.log")
        return ok("daemon", detail)
    holder = lock_holder(settings.lock)
    if holder is not None:
        who = f"pid {holder}" if holder > 0 else "a process"
        if starting := control.starting_note(settings):  # a migration's index built again: not to restart
            return warn("daemon", f"{who} does not answer yet{starting}", "wait: `nmem status` shows its progress")
        return fail("daemon", f"{who} holds {settings.lock} but does not answer on {settings.socket}",
                     "nmem daemon restart")  # fmt: skip
    refused = startup_problem(settings.home, settings.socket)
    if refused:  # every hook would start one that exits at once (issue #16, finding 7)
        return fail("daemon", f"not running, and cannot start: {refused}",
                     "fix that path, or point NMEM_HOME / NMEM_SOCKET elsewhere")  # fmt: skip
    return warn("daemon", "not running (the first hook event starts it)",
                 "nmem daemon start  # or: nmem service install")  # fmt: skip


def _recover_command(settings: Settings) -> str:
    """Move the file (with its -wal and -shm) aside and rebuild what SQLite can still read."""
    db = shlex.quote(settings.db)
    broken = shlex.quote(os.path.join(os.path.dirname(settings.db), f"broken-{int(time.time())}"))
    name = shlex.quote(os.path.basename(settings.db))
    return (f"nmem daemon stop && mkdir {broken} && mv {db}* {broken}/"
            f" && sqlite3 {broken}/{name} .recover | sqlite3 {db}")  # fmt: skip


def _table_exists(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def check_database(settings: Settings) -> list[Check]:
    """Integrity (quick_check, read-only), schema, file modes, WAL size and the raw-event backlog."""
    db = settings.db
    if not os.path.exists(db):
        return [ok("database", f"{db} does not exist yet: created on the first event")]
    unsafe = [w for w in (_private(p) for p in (db, db + "-wal") if os.path.exists(p)) if w]
    if unsafe:
        return [fail("database", unsafe[0], f"chmod 600 {shlex.quote(db)}*")]
    try:
        conn = readers.open_readonly(db)
        try:
            problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check(5)")]
            applied = {str(r[0]) for r in conn.execute("SELECT name FROM schema_migrations")} if _table_exists(
                conn, "schema_migrations") else set()  # fmt: skip
            inbox = conn.execute("SELECT count(*), min(received_at) FROM inbox").fetchone() if _table_exists(
                conn, "inbox") else (0, None)  # fmt: skip
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return [fail("database", f"{db} cannot be read: {exc}", _recover_command(settings))]
    checks = []
    if problems != ["ok"]:
        checks.append(fail("database", f"{db} is damaged: {'; '.join(problems)}", _recover_command(settings)))
    else:
        pending = [name for name, _ in MIGRATIONS if name not in applied]
        if pending and applied:
            checks.append(warn("database", f"{db}: schema waits for {', '.join(pending)}", "nmem daemon restart"))
        else:
            checks.append(ok("database", f"{db}: quick_check ok"))
    checks.append(_check_wal(settings))
    checks.append(_check_backlog(settings, int(inbox[0] or 0), inbox[1]))
    return checks


def _check_wal(settings: Settings) -> Check:
    try:
        wal = os.stat(settings.db + "-wal").st_size
    except OSError:
        wal = 0
    limit = 2 * WAL_TRUNCATE_BYTES
    if wal > limit:
        return warn("wal", f"{wal / 1048576:.0f} MB, more than twice the checkpoint threshold",
                     "nmem maintain --job checkpoint")  # fmt: skip
    return ok("wal", f"{wal / 1048576:.1f} MB")


def _check_backlog(settings: Settings, inbox: int, oldest: float | None) -> Check:
    spooled: list[float] = []
    try:
        for entry in os.scandir(settings.spool):
            if entry.name.endswith(".event"):
                spooled.append(entry.stat().st_mtime)
    except OSError:
        pass
    times = [t for t in (oldest, *spooled) if t is not None]
    waiting = inbox + len(spooled)
    if not waiting:
        return ok("backlog", "no raw events waiting")
    age = time.time() - min(times) if times else 0.0
    detail = f"{inbox} in the inbox, {len(spooled)} spooled, oldest {age:.0f} s"
    if age < STALE_BACKLOG_S:
        return ok("backlog", detail + " (the daemon drains them)")
    running = control.ping(timeout=2.0) is not None
    fix = "nmem daemon restart" if running else "nmem daemon start  # it stores them at start"
    return fail("backlog", f"{detail}: not stored yet", fix)


def _exec_start(unit_text: str) -> str | None:
    for line in unit_text.splitlines():
        if line.startswith("ExecStart="):
            words = command_paths(line.removeprefix("ExecStart=").lstrip("@-:+!"))
            return words[0] if words else None
    return None


def _systemctl(*args: str) -> str:
    try:
        done = subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True,
                              timeout=SYSTEMCTL_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    words = done.stdout.split()
    return words[0] if words else "unknown"


def check_service() -> Check:
    """Units are optional; when installed they must start an nmemd that exists, and be enabled."""
    from nmemd.setup import service

    if sys.platform == "darwin":
        plist = service.launchd_plist_path()
        if not plist.exists():
            return ok("service", "no LaunchAgent (optional: nmem service install)")
        import plistlib

        try:
            program = str(plistlib.loads(plist.read_bytes())["ProgramArguments"][0])
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            return fail("service", f"{plist} cannot be read: {exc}", "nmem service install")
        if not os.access(program, os.X_OK):
            return fail("service", f"{plist} starts {program}, which does not exist", "nmem service install")
        return ok("service", f"{plist} starts {program}")
    unit_dir = service.systemd_user_dir()
    units = [unit_dir / service.SOCKET_UNIT, unit_dir / service.SERVICE_UNIT]
    present = [u for u in units if u.exists()]
    if not present:
        return ok("service", "no systemd user units (optional: nmem service install)")
    if len(present) < len(units):
        missing = next(u for u in units if not u.exists())
        return fail("service", f"{missing} is missing", "nmem service install")
    try:
        program = _exec_start(units[1].read_text(encoding="utf-8"))
    except OSError as exc:
        return fail("service", f"{units[1]} cannot be read: {exc.strerror}", "nmem service install")
    if program is None or not os.access(program, os.X_OK):
        return fail("service", f"{units[1]} starts {program or 'nothing'}, which does not exist",
                     "nmem service install")  # fmt: skip
    enabled = _systemctl("is-enabled", service.SOCKET_UNIT)
    if enabled != "enabled":
        return warn("service", f"units installed, socket unit is {enabled}",
                     f"systemctl --user enable --now {service.SOCKET_UNIT}")  # fmt: skip
    return ok("service", f"{units[1]} starts {program}; socket enabled")


# --- all of them ---------------------------------------------------------------------------------


def _guarded(name: str, fn: Callable[[], Any]) -> list[Check]:
    """A check that cannot run is reported as a failed check, not as a traceback."""
    try:
        out = fn()
    except (OSError, sqlite3.Error, NmemError, ValueError) as exc:
        return [fail(name, f"could not check: {exc}", None)]
    return out if isinstance(out, list) else [out]


def _team_health() -> list[Check]:
    """Team memory's links, when a project is shared (psycopg is imported only then)."""
    from nmemd.team import local

    settings = load()
    if not os.path.exists(settings.db):
        return []
    conn = readers.open_readonly(settings.db)
    try:
        if not local.shared_projects(conn):
            return []
    finally:
        conn.close()
    from nmemd.setup import team_status

    return team_status.health(settings)


def check_capture(settings: Settings) -> Check:
    """Events kept outside an NMEM_HOME that could not be used, and hook input that was not usable."""
    from nmem_client import fallback, malformed

    kept = fallback.waiting(settings.home)
    if kept:
        folder, count, reason = kept
        fix = "make NMEM_HOME a folder of yours (or unset it), then: nmem daemon start"
        if reason.startswith("disk full"):  # nmem_client.inbox.full_disk_reason: the reason says what to free
            fix = f"free space on the disk holding {settings.home}, then: nmem daemon start"
        return fail("capture", f"{count} event{'s' * (count != 1)} waiting in {folder}: {reason}", fix)
    count, last = malformed.counted(settings.home)
    if count:
        record = os.path.join(settings.home, malformed.NAME)  # one line each: when, what, and from where
        return warn("capture", f"{count} hook input{'s' * (count != 1)} not usable (empty or not JSON), last {last}",
                    f"each is a line of {record} (when, what, which hook sent it)")  # fmt: skip
    return ok("capture", "no events waiting outside the store, no unusable hook input")


DISK_LOW_BYTES = 16 * 1024 * 1024  # less than this free where the store lives: events may be lost


def check_disk(settings: Settings) -> Check:
    """Free space on the disk holding NMEM_HOME: a full one loses what neither the store nor its inbox
    nor its spool can take (issue #37, 3)."""
    folder = settings.home if os.path.isdir(settings.home) else os.path.dirname(settings.home.rstrip("/")) or "/"
    try:
        st = os.statvfs(folder)
    except OSError as exc:
        return warn("disk", f"free space of {folder} unknown: {exc.strerror}")
    free = st.f_bavail * st.f_frsize
    if free < DISK_LOW_BYTES:
        from nmem_client.inbox import full_disk_reason

        state = "disk full" if free < 1024 * 1024 else f"disk almost full ({free // 1024} KB free)"
        return fail("disk", f"{state}: {full_disk_reason(settings.home).partition(': ')[2]}",
                    f"df -h {shlex.quote(folder)}; du -sh {shlex.quote(settings.home)}/*")  # fmt: skip
    return ok("disk", f"{free / 1073741824:.1f} GB free on the disk holding {settings.home}")


def run() -> Report:
    """Every check, in the order a problem is best fixed in."""
    first, settings = check_config()
    checks = [first]
    checks += _guarded("entry points", check_entry_points)
    checks += _guarded("path", check_path)
    for spec in registry.AGENTS.values():  # each agent's install, in the registry's order
        for name, check in spec.setup().checks if spec.setup is not None else ():
            checks += _guarded(name, functools.partial(check, settings))
    checks += _guarded("socket", lambda: check_socket(settings))
    checks += _guarded("daemon", lambda: check_daemon(settings))
    checks += _guarded("database", lambda: check_database(settings))
    checks += _guarded("capture", lambda: check_capture(settings))
    checks += _guarded("disk", lambda: check_disk(settings))
    checks += _guarded("service", check_service)
    checks += _guarded("team", _team_health)
    return Report(ok=all(c.status != "fail" for c in checks), checks=checks)
