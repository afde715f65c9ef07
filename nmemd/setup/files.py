"""How nmem changes a file of the user's: private from its first byte, through a link to the file it names,
and never a file the user made read-only or another user owns.

Every file an installer writes goes through `replace` (issue #28, findings 5 and 10): the new content is
written to a temporary file created with `O_CREAT|O_EXCL|O_NOFOLLOW` and its final mode (the replaced
file's, else 0600: `nmem_client.paths.create_private`), so no other user can read or open it at any
moment, whatever the umask; it is fsynced, then renamed over the file. A settings file that is a symlink
(a dotfile manager's) stays one: the file it leads to is the one replaced (`target`). A backup of what
is replaced is a new 0600 file each time, never one overwritten (`backup`).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path
from typing import Final

from nmem_client import paths
from nmemd.errors import SettingsError

PRIVATE: Final = 0o600
BACKUP_INFIX: Final = ".nmem-backup-"


def target(path: Path) -> Path:
    """The file a change of `path` writes: `path`, or the file its symlinks lead to. A SettingsError
    for a file nmem must not change: not a regular file, another user's, or read-only (its mode
    bits, which root's writes would ignore)."""
    real = Path(os.path.realpath(path))
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return real
    except OSError as exc:
        raise SettingsError(f"cannot read {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise SettingsError(f"{path} is not a regular file; nothing was changed")
    if st.st_uid != os.geteuid():
        raise SettingsError(
            f"{path} belongs to another user (uid {st.st_uid}); nothing was changed (--print shows what to add)"
        )
    if not st.st_mode & stat.S_IWUSR:
        raise SettingsError(f"{path} is read-only; nothing was changed (make it writable, or --print and edit it)")
    return real


def mode_of(path: Path, default: int = PRIVATE) -> int:
    """The permission bits the file at `path` has (`default` when there is none)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return default


def replace(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace the file at `path` (already `target`ed) by `data`, atomically; its mode is `mode`, else
    the replaced file's, else 0600. Its folder is made (private) when missing. Raises OSError."""
    mode = mode_of(path) if mode is None else mode
    paths.make_dirs(str(path.parent))
    for attempt in range(100):
        tmp = path.with_name(f".{path.name}.nmem-tmp-{os.getpid()}-{attempt}")
        try:
            paths.create_private(str(tmp), data, mode)
            break
        except FileExistsError:
            continue  # someone else's file of that name, or a link: never written through, never removed
    else:
        raise FileExistsError(f"no free temporary name beside {path}")
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


made: list[Path] = []  # the backups this process wrote: install and uninstall say where they went


def backup(path: Path, old: bytes) -> Path:
    """A new 0600 copy of `path`'s previous content beside it (settings files hold tokens), named by
    the time; none is ever overwritten. An earlier copy with the same bytes goes: it holds nothing the
    new one does not, and each install and uninstall would otherwise add one (issue #37, 4)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        name = path.with_name(f"{path.name}{BACKUP_INFIX}{stamp}" + (f"-{n}" if n else ""))
        try:
            paths.create_private(str(name), old, PRIVATE)
        except FileExistsError:
            continue
        made.append(name)
        _drop_copies(path, name, old)
        return name
    raise FileExistsError(f"no free backup name beside {path}")


def _drop_copies(path: Path, kept: Path, content: bytes) -> None:
    for earlier in backups(path):
        try:
            if earlier == kept or earlier.is_symlink() or earlier.read_bytes() != content:
                continue
            earlier.unlink()
        except OSError:
            continue
        if earlier in made:
            made.remove(earlier)


def backups(path: Path) -> list[Path]:
    """The backups nmem made of `path`, newest first."""
    prefix = f"{path.name}{BACKUP_INFIX}"
    found = [p for p in path.parent.glob(f"{path.name}{BACKUP_INFIX}*") if p.name.startswith(prefix)]

    def key(p: Path) -> tuple[str, int]:
        parts = p.name[len(prefix) :].split("-")  # date, time, then a number on a second backup in that second
        return ("-".join(parts[:2]), int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 0)

    return sorted(found, key=key, reverse=True)
