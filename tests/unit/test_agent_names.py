"""Every per-agent fact comes from the agents' registry (issue #38): the hook client's copy of their
reply forms is what the registry renders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nmem_client import fallback
from nmemd import registry
from nmemd.recall import notice_forms
from nmemd.recall.replies import shaped_reply

REPO = Path(__file__).resolve().parents[2]


def test_the_clients_notice_forms_are_what_the_registry_renders() -> None:
    """Rendered by `python -m nmemd.recall.notice_forms > nmem_client/notice_forms.py` after a spec changes."""
    assert (REPO / "nmem_client" / "notice_forms.py").read_text() == notice_forms.render()


@pytest.mark.parametrize(
    "notice", ["nmem: the daemon cannot start: no socket. Run `nmem doctor`.", 'a "quoted" \\ notice\n\tté\x01']
)
def test_the_fallback_notice_is_the_daemons_reply_for_every_agent(notice: str) -> None:
    """Without a daemon the client answers SessionStart as the daemon would, in each agent's own form."""
    for spec in registry.builtin():
        for name in (spec.name, *spec.aliases):
            ours = fallback.notice_reply(name.encode(), notice)
            daemons = shaped_reply("SessionStart", "", name, notice)
            assert json.loads(ours) == json.loads(daemons), name
            if notice.isprintable():
                assert ours == daemons, name
    assert fallback.notice_reply(b"", notice) == fallback.notice_reply(b"claude-code", notice)


def test_an_agent_the_client_does_not_know_reads_the_notice_in_its_context() -> None:
    reply = json.loads(fallback.notice_reply(b"tinybot", "nmem: a notice"))
    assert reply == {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "nmem: a notice"}}


# Where a built-in agent's name may be spelled outside its folder, nmemd/agents/<name>/ (docs/agents.md
# lists the same): file pattern -> (the names allowed there, None: any; why).
EXCEPTIONS: dict[str, tuple[frozenset[str] | None, str]] = {
    "nmemd/registry.py": (None, "the registry itself: the built-in agents' folders"),
    "nmem_client/notice_forms.py": (None, "generated from the registry: the hook client cannot import it"),
    "nmem_client/mcp_handshake.json": (None, "generated from the MCP server: `agent`'s enum is the registry's"),
    "nmem_client/bridge.py": (frozenset({"cursor"}), "MCP's `tools/list` cursor (a page)"),
    "nmemd/team/*": (frozenset({"cursor"}), "a team feed's read position"),
    "nmemd/store/migrations.py": (frozenset({"cursor"}), "the team_cursors table"),
    "nmemd/web/pages.py": (frozenset({"cursor"}), "CSS's cursor property"),
}


def _spelled(text: str, names: list[str]) -> set[str]:
    """The names `text` holds anywhere, as `git grep` finds them (case-sensitive, inside words too)."""
    return {name for name in names if name in text}


def test_no_module_outside_an_agents_folder_names_a_built_in_agent() -> None:
    """Adding an agent is its folder and one line in the registry (issue #38): the core, the hook client and
    the CLI loop over the specs, so nothing else may spell a built-in agent's name (Claude Code, the
    default agent, is `nmemd.model.CLAUDE_CODE`)."""
    from fnmatch import fnmatch

    from nmemd.model import CLAUDE_CODE

    specs = registry.builtin()
    names = sorted({n for s in specs if s.name != CLAUDE_CODE for n in (s.name, *s.aliases)})
    names += [f for f in registry.BUILTIN if f not in names and f != CLAUDE_CODE.replace("-", "_")]
    own = tuple(f"nmemd/agents/{folder}/" for folder in registry.BUILTIN)
    found: list[str] = []
    for top in ("nmemd", "nmem_client"):
        for path in sorted((REPO / top).rglob("*")):
            rel = path.relative_to(REPO).as_posix()
            if not path.is_file() or "__pycache__" in rel or rel.startswith(own):
                continue
            allowed = set().union(*(n or names for p, (n, _) in EXCEPTIONS.items() if fnmatch(rel, p)))
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if _spelled(line, names) - allowed:
                    found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_exceptions_are_the_ones_docs_agents_md_lists() -> None:
    doc = (REPO / "docs" / "agents.md").read_text()
    for pattern in EXCEPTIONS:
        assert f"`{pattern.removesuffix('*')}" in doc, pattern
