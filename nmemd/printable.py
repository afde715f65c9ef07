"""Text as it may reach a terminal, a model's context or a page: no control characters.

A teammate's row (or a hostile server's) is data: its title, body, agent or author must never
clear my screen, hide text, or print an OSC 8 link whose text differs from its target. So every
output (the CLI, the SessionStart context, the MCP tools' results, the viewer) passes what it
prints through `printable`: whole escape sequences (CSI, OSC, DCS and the like, 7- and 8-bit) go
first, so no stray parameters are left behind, then every other C0 and C1 control character but
newline and tab, DEL, and the bidirectional overrides (text shown in another order than stored).
"""

from __future__ import annotations

import re
from typing import Any, Final

# ESC [ ... final, ESC ] ... (BEL or ST), ESC P/X/^/_ ... ST, and their one-byte C1 forms; then a
# lone ESC with the character it introduces.
_SEQUENCE: Final = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
_CONTROL: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` without escape sequences and control characters (newline and tab kept)."""
    if not _CONTROL.search(text):  # the common case: nothing to do
        return text
    return _CONTROL.sub("", _SEQUENCE.sub("", text))


def printable_line(text: str) -> str:
    """One line: `printable`, with newlines and tabs as spaces."""
    return " ".join(printable(text).split()) if text else text


def deep(value: Any) -> Any:
    """Every string of a decoded JSON value (keys too) made `printable`."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [deep(v) for v in value]
    if isinstance(value, dict):
        return {deep(k): deep(v) for k, v in value.items()}
    return value
