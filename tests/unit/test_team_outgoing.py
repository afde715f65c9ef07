"""What may leave the machine of a shared project's row (issue #36, findings 16 and 19): pure
functions over text, no server."""

from __future__ import annotations

import pytest

from nmemd.team.outgoing import PATH_HIDDEN, PROMPT_HIDDEN, hide_prompts, relative_paths, shareable, shareable_file

ROOT = "/home/kim/src/api"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("edit /home/kim/src/api/src/x.py now", "edit src/x.py now"),
        ("cd /home/kim/src/api && ls", "cd . && ls"),
        ("cat /home/kim/src/secret-project/notes.md", f"cat {PATH_HIDDEN}"),
        ("cat ~/.aws/credentials", f"cat {PATH_HIDDEN}"),
        ("ls //home/kim/other", f"ls {PATH_HIDDEN}"),
        (
            'File "/home/kim/.venv/lib/python3.11/site-packages/requests/api.py"',
            'File "…/site-packages/requests/api.py"',
        ),
        ("/usr/lib/python3.11/json/__init__.py:9", "/usr/lib/python3.11/json/__init__.py:9"),
        ("GET /health 200", "GET /health 200"),
        ("https://github.com/acme/api/blob/main/x.py", "https://github.com/acme/api/blob/main/x.py"),
        ("src/a/b.py and ./c.py", "src/a/b.py and ./c.py"),
        ("ratio 3/4 and a/b", "ratio 3/4 and a/b"),
    ],
)
def test_paths_are_relative_or_dropped(text: str, shown: str) -> None:
    assert relative_paths(text, ROOT) == shown


def test_file_columns_stay_inside_the_project() -> None:
    assert shareable_file(f"{ROOT}/src/x.py", ROOT) == "src/x.py"
    assert shareable_file("src/x.py", ROOT) == "src/x.py"
    for outside in ("/home/kim/other/x.py", f"{ROOT}//etc/passwd", "../other/x.py", f"{ROOT}/../x", "~/x", None, ""):
        assert shareable_file(outside, ROOT) is None, outside


def test_prompts_are_hidden_unless_shared() -> None:
    prompt = "deploy the quarterly plan to the mars colony"
    summary = (
        f'1. Primary Request and Intent:\n   plan\n6. All user messages:\n   - "{prompt}"\n   - yes\n'
        "7. Pending Tasks:\n   - none\n"
    )
    hidden = hide_prompts(summary, [prompt])
    assert "mars" not in hidden and f"6. All user messages: {PROMPT_HIDDEN}" in hidden and "7. Pending Tasks" in hidden
    assert hide_prompts(f"you asked: {prompt}.", [prompt]) == f"you asked: {PROMPT_HIDDEN}."
    assert hide_prompts("yes, go on", ["yes"]) == "yes, go on"  # too short to be a disclosure
    assert "mars" in shareable(summary, root=ROOT, prompts=[prompt], share_prompts=True)
    assert (
        shareable("token glpat-xY7zQ2mN4pL8kR1tV6wB <private>x</private>", root=ROOT)
        == "token [REDACTED:gitlab-token] "
    )
