"""Each agent's SessionStart notice reply, as the parts around the notice's JSON string (b"": no
`--agent`). Generated from the agents' registry by `python -m nmemd.recall.notice_forms`: do not edit.
"""

FORMS: dict[bytes, tuple[bytes, ...]] = {
    b"": (
        b'{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":""},"systemMessage":',
        b"}",
    ),
    b"claude-code": (
        b'{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":""},"systemMessage":',
        b"}",
    ),
    b"claude": (
        b'{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":""},"systemMessage":',
        b"}",
    ),
    b"codex": (
        b'{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":""},"systemMessage":',
        b"}",
    ),
    b"gemini": (
        b'{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":""},"systemMessage":',
        b"}",
    ),
    b"copilot": (
        b'{"additionalContext":',
        b"}",
    ),
    b"cursor": (
        b'{"additional_context":',
        b"}",
    ),
    b"cline": (
        b'{"cancel":false,"contextModification":',
        b"}",
    ),
    b"opencode": (
        b'{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":',
        b"}}",
    ),
}
