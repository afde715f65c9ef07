"""The small text helpers recall shares: a line clipped at a word, a path relative to its project or
cut to its tail, a command's first line, and what kind of command it is (build and test, other work,
looking around)."""

from __future__ import annotations

import re
from typing import Final

from nmemd.remembered import remembered


def clip(text: str, limit: int) -> str:
    """One line of at most `limit` chars: whitespace collapsed, cut at a word with an ellipsis."""
    line = " ".join(text[: limit * 4].split())
    if len(line) <= limit:
        return line
    cut = line[: limit - 1]
    space = cut.rfind(" ", limit // 2)
    return (cut[:space] if space > 0 else cut).rstrip(" ,;:") + "…"


def rel(path: str, project: str | None) -> str:
    """`path` relative to the project root when it is under it (shorter and stable across machines)."""
    root = (project or "").rstrip("/")
    if root and path.startswith(root + "/") and len(path) > len(root) + 1:
        return path[len(root) + 1 :]
    return path


def short_path(path: str, limit: int = 120) -> str:
    """A path of at most `limit` chars, keeping its tail: the file name says the most."""
    return path if len(path) <= limit else "…" + path[-(limit - 1) :]


def command_line(command: str, limit: int = 100) -> str:
    """The first non-empty line of a command, bounded (heredocs and scripts stay one line)."""
    for line in command.splitlines():
        if line.strip():
            return clip(line, limit)
    return ""


# Commands worth remembering as "this is how to build/test/check this project".
_BUILD_RE: Final = re.compile(
    r"(?:^|[\s;&|(/])(?:pytest|tox|nox|make|cmake|ninja|bazel|cargo|go\s+(?:test|build|vet|run)|mix|gradlew?|mvn"
    r"|tsc|jest|vitest|ruff|mypy|pyright|eslint|prettier|black|flake8|pylint|rspec|rake|bundle|dotnet"
    r"|swift\s+(?:build|test)|docker\s+(?:build|compose)|(?:npm|pnpm|yarn|bun)\s+(?:test|run|build|install|ci)"
    r"|uv\s+(?:run|sync|pip|build)|pip3?\s+install|python3?\s+-m\s+(?:pytest|unittest|mypy|build|pip)"
    r"|poetry\s+(?:run|install|build)|npx|deno\s+(?:test|task)|phpunit|composer|alembic|terraform)\b"
)
# Looking around is not a result: these never make the "commands that worked" lists.
_TRIVIAL_RE: Final = re.compile(
    r"^\s*(?:cd\s+\S+\s*&&\s*)?(?:ls|ll|cat|head|tail|wc|echo|printf|pwd|cd|which|type|file|stat|du|df|tree"
    r"|grep|rg|ag|find|fd|sed\s+-n|awk|sort|uniq|less|more|env|printenv|whoami|date|sleep|true|clear"
    r"|git\s+(?:status|diff|log|show|branch|remote|rev-parse|blame|ls-files))\b"
)


def looks_around(command: str) -> bool:
    """Whether a command only looks around (`ls`, `cat`, `grep`, `git status`), whatever it names."""
    return bool(_TRIVIAL_RE.match(command_line(command, 400)))


@remembered(4096)
def command_kind(command: str) -> int:
    """2: build/test/lint/install, 1: other work, 0: trivial looking around.

    Cached: a project's commands come back in every context and every search that ranks them."""
    first = command_line(command, 400)
    if not first:
        return 0
    if _BUILD_RE.search(first):
        return 2
    if _TRIVIAL_RE.match(first):
        return 0
    return 1
