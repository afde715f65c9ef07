"""A record of hook input nmem could not use (empty, not JSON), which `nmem status` and `nmem doctor`
count: a hook that sends nothing usable must not look like a quiet session (issue #31, item 2).

`$NMEM_HOME/malformed`: one line per input, `<unix time> <what>`, appended by the client (empty
input) and the daemon (input it refused, on the socket or from the inbox); past 64 KB it becomes
`malformed.1` and a new file starts, so the count is of the last thousand or so.
"""

from __future__ import annotations

import os
import time

from nmem_client import paths

NAME = "malformed"
MAX_BYTES = 64 * 1024


def note(what: str, home: str | None = None) -> None:
    """Append one line; never raises, writes nothing into a home that is not ours."""
    home = home or paths.home()
    if paths.own_folder_problem(home) is not None or not os.path.isdir(home):
        return
    path = os.path.join(home, NAME)
    line = f"{time.time():.0f} {' '.join(what.split())[:200]}\n".encode("utf-8", "replace")
    try:
        try:
            if os.lstat(path).st_size > MAX_BYTES:
                os.replace(path, path + ".1")
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        pass


def sender() -> str:
    """The command that ran the hook client (the agent's hook runner, a shell): what sent the input."""
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            argv = f.read(300).split(b"\0")
        return "`" + " ".join(a.decode("utf-8", "replace") for a in argv if a)[:120] + f"` (pid {os.getppid()})"
    except OSError:
        return f"pid {os.getppid()}"


def counted(home: str) -> tuple[int, str]:
    """(how many inputs were recorded, the last line's text); (0, "") when none."""
    total, last = 0, ""
    for name in (NAME + ".1", NAME):
        try:
            text = paths.read_regular(os.path.join(home, name), 2 * MAX_BYTES).decode("utf-8", "replace")
        except OSError:
            continue
        lines = text.splitlines()
        total += len(lines)
        if lines:
            stamp, _, what = lines[-1].partition(" ")
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(stamp))) if stamp.isdigit() else "?"
            last = f"{when}: {what}"
    return total, last
