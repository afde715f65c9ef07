"""A hooks file that holds one list of handlers per event, `{"hooks": {"<event>": [handler, ...]}}`:
Copilot's settings.json and Cursor's hooks.json. nmem's handler is recognised by the command it runs
(`settings_file.is_our_command`) under the key the agent names it by; it is added last, once, and removed
exactly, every other handler and key kept as it was."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmemd.errors import SettingsError
from nmemd.setup import settings_file


@dataclass(frozen=True)
class HandlerLists:
    command_key: str  # the handler's key that holds its command ("bash", "command")
    handler: Callable[[str], dict[str, Any]]  # nmem's handler running a command
    drop_emptied: bool = False  # remove `hooks` when it held only nmem's handlers

    def is_ours(self, h: object) -> bool:
        return isinstance(h, dict) and settings_file.is_our_command(h.get(self.command_key))

    def hooks(self, data: dict[str, Any], path: Path) -> dict[str, Any]:
        """The file's `hooks` object (its lists checked); a clear error for another shape."""
        hooks = data.get("hooks", {})
        if not isinstance(hooks, dict):
            raise SettingsError(f'{path}: "hooks" is not an object')
        for event, handlers in hooks.items():
            if not isinstance(handlers, list):
                raise SettingsError(f'{path}: "hooks.{event}" is not a list')
        return hooks

    def ours(self, data: dict[str, Any], path: Path) -> list[tuple[str, str]]:
        """(event, command) of every handler of nmem's in the file's content."""
        key = self.command_key
        return [(e, str(h[key])) for e, hs in self.hooks(data, path).items() for h in hs if self.is_ours(h)]

    def without(self, data: dict[str, Any], path: Path) -> dict[str, Any]:
        cleaned = copy.deepcopy(data)
        hooks = self.hooks(cleaned, path)
        for event in list(hooks):
            kept = [h for h in hooks[event] if not self.is_ours(h)]
            if len(kept) != len(hooks[event]):
                if kept:
                    hooks[event] = kept
                else:
                    del hooks[event]
        if self.drop_emptied and data.get("hooks") and not hooks:  # held only nmem's
            del cleaned["hooks"]
        return cleaned

    def with_(self, data: dict[str, Any], path: Path, command: str, events: Iterable[str]) -> dict[str, Any]:
        """A copy of `data` with nmem's handlers present once, current and last, nothing else changed."""
        merged = copy.deepcopy(data)
        hooks = self.hooks(merged, path)
        ours = self.handler(command)
        for event in events:
            existing = hooks.get(event, [])
            if [h for h in existing if self.is_ours(h)] == [ours] and existing[-1] == ours:
                continue
            hooks[event] = [h for h in existing if not self.is_ours(h)] + [ours]
        merged["hooks"] = hooks
        return merged


Merge = Callable[[dict[str, Any], Path, str], dict[str, Any]]  # (content, its path, a command) -> new content


@dataclass(frozen=True)
class HooksFileAndMcpFile:
    """An agent that keeps its hooks and its MCP servers in two JSON files of its own (Copilot, Cursor):
    what an install and an uninstall would write to each, and how an uninstall gives a file back."""

    hooks_path: Callable[[], Path]
    mcp_path: Callable[[], Path]
    hook_command: Callable[[], str]
    with_hooks: Merge
    without_hooks: Callable[[dict[str, Any], Path], dict[str, Any]]
    with_mcp: Merge

    def plan_install(self, mcp: bool = True) -> settings_file.HooksAndMcp:
        hp, mp = self.hooks_path(), self.mcp_path()
        data = self.with_hooks(settings_file.load(hp), hp, self.hook_command())
        servers = self.with_mcp(settings_file.load(mp), mp, settings_file.mcp_command()) if mcp else None
        return settings_file.HooksAndMcp(hp, data, mp, servers)

    def plan_uninstall(self, mcp: bool = True) -> settings_file.HooksAndMcp:
        hp, mp = self.hooks_path(), self.mcp_path()
        data = self.without_hooks(settings_file.load(hp), hp) if hp.exists() else {}
        servers = settings_file.without_mcp(settings_file.load(mp), mp) if mcp and mp.exists() else None
        command, server = self.hook_command(), settings_file.mcp_command()
        hooks_undo = settings_file.Undo(lambda d: self.with_hooks(d, hp, command), lambda d: self.without_hooks(d, hp))
        mcp_undo = settings_file.Undo(
            lambda d: self.with_mcp(d, mp, server), lambda d: settings_file.without_mcp(d, mp)
        )
        return settings_file.HooksAndMcp(hp, data, mp, servers, hooks_undo, mcp_undo)
