"""What the agents' doctor checks share (each agent's checks are in its folder's setup.py): the verdict
on a list of nmem's hooks and on an `mcpServers` entry, and which other agents nmem's hooks are
installed for."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from nmemd import registry
from nmemd.setup.checks import Check, command_paths, fail, ok, warn


def other_agents() -> str:
    """The other agents nmem's hooks are installed for ("Codex", "Codex and Gemini CLI"); "" for none."""
    setups = [(spec.label, spec.setup()) for spec in registry.AGENTS.values() if spec.setup is not None]
    return " and ".join(label for label, setup in setups if setup.hooked is not None and setup.hooked())


def hooks_check(
    label: str, where: str, fix: str, hooks: list[tuple[str, str]], wanted: Iterable[str], expected: str
) -> Check | None:
    """The verdict on an agent's (event, command) hooks of nmem's; None when they are all in order."""
    missing = [e for e in wanted if e not in {e for e, _ in hooks}]
    broken = sorted({p for _, c in hooks for p in command_paths(c) if not os.path.exists(p)})
    if not hooks:
        return fail(label, f"no nmem hooks in {where}", fix)
    if missing:
        return fail(label, f"{where} lacks nmem hooks for {', '.join(missing)}", fix)
    if broken:
        return fail(label, f"hooks in {where} call {broken[0]}, which does not exist", fix)
    if any(c != expected for _, c in hooks):
        return warn(label, f"hooks in {where} call another nmem installation than this one", fix)
    return None


def mcp_check(label: str, key: str, mcp: object, where: str, fix: str) -> Check:
    """The verdict on an `mcpServers`-style entry of nmem's: there, and running a command that exists."""
    command = mcp.get("command") if isinstance(mcp, dict) else None
    if mcp is None:
        return warn(label, f"no {key} in {where}", fix)
    if not isinstance(command, str) or not os.path.exists(command):
        return fail(label, f"{key} runs {command or '(nothing)'}, which does not exist", fix)
    return ok(label, f"{key} in {where} runs {command}")


def mcp_executable(label: str, key: str, command: str | None, where: str, fix: str) -> Check:
    """The verdict on nmem's MCP server entry `key` of an agent's config: there (`command` None: not),
    and running an executable."""
    if command is None:
        return warn(label, f"no {key} in {where}", fix)
    if not os.access(command, os.X_OK):
        return fail(label, f"{key} runs {command or '(nothing)'}, not an executable", fix)
    return ok(label, f"{key} in {where} runs {command}")


def mcp_server(data: dict[str, Any], name: str) -> object:
    servers = data.get("mcpServers")
    return servers.get(name) if isinstance(servers, dict) else None
