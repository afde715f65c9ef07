"""`nmemd`: run the daemon in the foreground (systemd, launchd or a client start it)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

EXIT_OK = 0
EXIT_STARTUP_FAILURE = 3  # config, paths or database unusable
EXIT_ALREADY_RUNNING = 4  # another nmemd serves this socket (RestartPreventExitStatus)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nmemd", description="nmem's per-user memory daemon (foreground).")
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="exit after this long without connections (0: never; default from config)",
    )
    parser.add_argument("--socket", default=None, help="socket path (default: NMEM_SOCKET or the per-user path)")
    parser.add_argument(
        "--started-by", default="user", choices=["user", "client", "systemd", "launchd"], help=argparse.SUPPRESS
    )
    parser.add_argument("--log-stderr", action="store_true", help="also log to stderr")
    return parser.parse_args(argv)


def _take_report_fd() -> int | None:
    """The pipe a starting hook client waits on (nmem_client.inbox.start_daemon), kept from our children."""
    import os

    raw = os.environ.pop("NMEM_START_REPORT_FD", "")
    if not raw.isdigit():
        return None
    try:
        os.set_inheritable(int(raw), False)
    except OSError:
        return None
    return int(raw)


def _cannot_start(report: int | None, message: str) -> None:
    """Say why on stderr and to the client that started us, which then stops waiting at once."""
    import os

    print(f"nmemd: {message}", file=sys.stderr)  # noqa: T201
    if report is not None:
        try:
            os.write(report, f"failed {' '.join(message.split())[:300]}\n".encode("utf-8", "replace"))
        except OSError:
            pass


def _startup_failed(report: int | None, exc: Exception) -> NoReturn:
    """Exit for a daemon that cannot start: its log says why (started by a hook or `nmem daemon
    start`, stderr is /dev/null), and so do stderr and the client that started it."""
    import logging

    logging.getLogger("nmemd").error("startup failed: %s", exc)
    _cannot_start(report, str(exc))
    sys.exit(EXIT_STARTUP_FAILURE)


def _already_running(exc: Exception) -> NoReturn:
    print(f"nmemd: {exc}", file=sys.stderr)  # noqa: T201
    sys.exit(EXIT_ALREADY_RUNNING)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    report = _take_report_fd()

    import msgspec

    from nmemd import config
    from nmemd.daemon import logs
    from nmemd.daemon.instance import InstanceLock, ensure_private_dir, ensure_socket_dir
    from nmemd.errors import AlreadyRunning, NmemError

    overrides: dict[str, object] = {}
    if args.idle_timeout is not None:
        overrides["idle_timeout_s"] = args.idle_timeout
    if args.socket:
        overrides["socket"] = args.socket
    # What cannot be used of the config is left out and said (log, status, SessionStart), never a
    # reason to stop: a daemon that exits leaves every session without memory (issue #31, item 3).
    settings, _, problems = config.load_checked(overrides)
    if problems:  # nothing the user changed is swept by a default meanwhile
        settings = msgspec.structs.replace(settings, maintenance_retention_interval_s=0.0)
    try:
        # NMEM_HOME is checked before anything is written in it: a `logs` symlink planted in another
        # user's folder made the daemon write its log where it pointed (issue #28, finding 11).
        ensure_private_dir(settings.home)
        ensure_private_dir(settings.log_dir)
        logs.setup(settings.log_dir, settings.log_level, stderr=args.log_stderr)
    except (NmemError, OSError) as exc:
        _cannot_start(report, str(exc))  # no log of ours to write to
        sys.exit(EXIT_STARTUP_FAILURE)
    import logging

    # Take the instance lock before importing the daemon: when many starters race (clients
    # autostarting after a crash), losers exit before paying for them (20 at once on 2 cores: ~0.7 s
    # instead of ~3.8 s). serve() adopts the lock.
    lock = InstanceLock(settings.lock)
    store_lock = InstanceLock(settings.store_lock, note=settings.socket)
    try:
        ensure_socket_dir(settings.socket, settings.home)
        lock.acquire()
        store_lock.acquire()  # another socket may serve this store already (another environment)
        for problem in problems:  # said once, by the daemon that serves (not by every racing starter)
            logging.getLogger("nmemd").error("config: %s", problem)
        if problems:
            logging.getLogger("nmemd").error("config: retention sweep off until the config is fixed (nmem doctor)")
        for note in config.retired_notes(settings.home):  # ignored, and nothing else changes
            logging.getLogger("nmemd").warning("config: %s", note)
    except AlreadyRunning as exc:
        lock.release()
        _already_running(exc)
    except (NmemError, OSError) as exc:
        _startup_failed(report, exc)
    import anyio

    from nmemd import gc_tuning
    from nmemd.daemon import malloc_tuning
    from nmemd.daemon.server import serve
    from nmemd.store import sqlite_tuning

    sqlite_tuning.disable_memstatus()  # before the first connection
    malloc_tuning.keep_heap()
    gc_tuning.own_process()

    try:
        anyio.run(lambda: serve(settings, started_by=args.started_by, problems=problems), backend="asyncio")
    except AlreadyRunning as exc:
        _already_running(exc)
    except (NmemError, OSError) as exc:
        _startup_failed(report, exc)
    except KeyboardInterrupt:
        pass
    finally:
        store_lock.release()  # serve() released them already unless it failed before adopting them
        lock.release()
    sys.exit(EXIT_OK)


if __name__ == "__main__":
    main()
