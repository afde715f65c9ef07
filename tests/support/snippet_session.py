"""One Claude Code session whose failures print long tool output (a pytest run, a ruff report): the rows
the snippet tests cut, highlight and search, in process (tests/unit/test_snippets.py) and through the
`nmem` CLI (tests/daemon/test_snippets_cli.py)."""

from __future__ import annotations

from typing import Any

from support.helpers import claude_event

SESSION = "snip"
PYTEST_OUT = (
    "============================= test session starts ==============================\n"
    "collected 3 items\n\n"
    "tests/test_walrus.py ..F                                                 [100%]\n\n"
    "=================================== FAILURES ===================================\n"
    "E       AssertionError: walrus parser dropped the tab in 'a\\tb' ⟦kept⟧\n"
    "FAILED tests/test_walrus.py::test_tabs - AssertionError: walrus parser dropped the tab\n"
    "========================= 1 failed, 2 passed in 0.12s ==========================\n"
)


def failed(cwd: str, command: str, output: str) -> dict[str, Any]:
    return claude_event("PostToolUseFailure", SESSION, cwd, tool_name="Bash", tool_input={"command": command},
                         error=f"Exit code 1\n{output}")  # fmt: skip


def snippet_session(cwd: str) -> list[dict[str, Any]]:
    """A prompt, a failed pytest run, a failed ruff check, a passing pytest run with stored brackets."""
    ruff = "\n".join(
        ["Using CPython 3.14.0", "Installed 69 packages in 435ms"]
        + [f"F401 [*] `mod{n}.Thing` imported but unused\n  --> src/pkg/safety.py:{n}:1" for n in range(12)]
        + ["N818 Exception name `ConfirmationRequired` should be named with an Error suffix",
           "  --> src/pkg/safety.py:19:7", "Found 13 errors."]
    )  # fmt: skip
    return [
        claude_event("UserPromptSubmit", SESSION, cwd, prompt="make the walrus parser keep tabs"),
        failed(cwd, "pytest -q tests/test_walrus.py", PYTEST_OUT),
        failed(cwd, "uv run ruff check src/pkg/safety.py", ruff),
        claude_event("PostToolUse", SESSION, cwd, tool_name="Bash", tool_input={"command": "pytest -q"},
                      tool_response={"stdout": "tests/test_zebra.py ...  [100%] ⟦kept⟧\n3 passed in 0.1s", "stderr": "",
                                     "interrupted": False}),
    ]  # fmt: skip
