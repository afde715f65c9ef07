"""The hook client's copy of each agent's SessionStart notice reply (`nmem_client/notice_forms.py`),
rendered from the registry: the client is standard library only and cannot import it.

`python -m nmemd.recall.notice_forms > nmem_client/notice_forms.py` writes it again after a change to an
agent's spec; tests/unit/test_agent_names.py fails while the file is not what this renders.
"""

from __future__ import annotations

import sys

from nmemd import registry
from nmemd.model import CLAUDE_CODE
from nmemd.recall.replies import shaped_reply

_MARK = "NMEM-NOTICE-TEXT"  # a notice that JSON leaves as it is: the parts of the reply around it


def forms() -> dict[str, tuple[bytes, ...]]:
    """Each built-in agent's name and alias (and "": Claude Code's hooks pass none) -> the parts of its
    SessionStart reply around the notice's JSON string, as the daemon shapes it (`shaped_reply`)."""
    out: dict[str, tuple[bytes, ...]] = {}
    for spec in registry.builtin():
        parts = tuple(shaped_reply("SessionStart", "", spec.name, _MARK).split(f'"{_MARK}"'.encode()))
        for name in ("" if spec.name == CLAUDE_CODE else None, spec.name, *spec.aliases):
            if name is not None:
                out[name] = parts
    return out


def _literal(value: bytes) -> str:
    """`value` as ruff format writes it: double quotes unless it holds one."""
    text = repr(value)
    return f'b"{text[2:-1]}"' if b'"' not in value and b"'" not in value else text


def render() -> str:
    lines = [
        '"""Each agent\'s SessionStart notice reply, as the parts around the notice\'s JSON string (b"": no',
        "`--agent`). Generated from the agents' registry by `python -m nmemd.recall.notice_forms`: do not edit.",
        '"""',
        "",
        "FORMS: dict[bytes, tuple[bytes, ...]] = {",
    ]
    for name, parts in forms().items():
        lines += [f"    {_literal(name.encode())}: (", *(f"        {_literal(part)}," for part in parts), "    ),"]
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
