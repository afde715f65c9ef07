"""How the history readers open an agent's file: never waiting, regular files only, every read bounded.

An import runs every hour over folders other programs write (issue #28, finding 4): a FIFO where a side
file belongs hung it for good, `/dev/zero` behind a link filled memory until the whole run died, and a
line of tiny JSON values (`[[],[],...]`) cost 27 bytes of memory per byte of line. Every reader opens
through `open_file` (`nmem_client.paths.open_regular`: `O_NONBLOCK`, so a FIFO answers at once; then
`fstat`: a regular file or an OSError) or reads through `read_file` (the same, at most `limit` bytes),
and every JSON text is counted before it is decoded (`too_many_values`). A file that fails is the
caller's to report; the run goes on with the next.
"""

from __future__ import annotations

import errno
import os
import re
from typing import BinaryIO, Final

from nmem_client import paths

SIDE_MAX: Final = 64 * 1024  # a side file that names a folder (Gemini's `.project_root`, Cline's `<id>.json`)
PROJECTS_MAX: Final = 4 * 1024 * 1024  # Gemini's `projects.json`: one short line per project
# JSON values one decoded text may hold: each costs 30-70 bytes as a Python object, so a million is
# ~70 MB. Real lines hold far fewer (text is in strings: a 30 MB tool output is one value).
VALUES_MAX: Final = 1_000_000
_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


def open_file(path: str, *, follow: bool = True) -> BinaryIO:
    """`path` opened for reading, if it is a regular file (`follow`: through a symlink too). Raises
    OSError at once for anything else: a FIFO, a device, a folder, a link when not `follow`."""
    try:
        fd = paths.open_regular(path, follow=follow)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise OSError(errno.ELOOP, "a symbolic link, not read", path) from None
        raise
    try:
        os.set_blocking(fd, True)  # a regular file never waits; clear the flag for Python's buffered reads
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_file(path: str, limit: int, *, follow: bool = True) -> bytes:
    """The whole regular file at `path`, or an OSError when it is not one or holds over `limit` bytes
    (checked before reading, and again by reading at most one byte more: a file may grow meanwhile)."""
    with open_file(path, follow=follow) as f:
        if os.fstat(f.fileno()).st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {_mb(limit)}", path)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {_mb(limit)}", path)
    return data


def too_many_values(raw: bytes, limit: int = VALUES_MAX) -> bool:
    """Whether the JSON text `raw` holds more than `limit` values outside its strings (what decoding it
    would build). Costs nothing for a text under `limit` bytes, which cannot hold that many."""
    if len(raw) <= limit:
        return False
    upper = _separators(raw, 0, len(raw))  # an upper bound: the ones inside strings counted too
    if upper <= limit:
        return False
    bare = _STRING.sub(b"", raw)  # one pass in C (a copy at most the text's size: cheaper than a pass per string)
    return _separators(bare, 0, len(bare)) > limit


def _separators(raw: bytes, start: int, end: int) -> int:
    return sum(raw.count(c, start, end) for c in (b",", b":", b"[", b"{"))


def _mb(n: int) -> str:
    return f"{n // (1024 * 1024)} MB" if n >= 1024 * 1024 else f"{n // 1024} KB"
