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
