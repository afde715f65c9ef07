"""Merge nmem's hooks and MCP server into an agent's JSON settings file, and take them out again: the
toolkit every agent's installer (`nmemd/agents/<name>/setup.py`) writes its settings with.

Every other key and every other tool's hook is kept as it was. nmem's own
handlers are recognised by their command, exactly as install writes it (`is_our_command`), so
running install twice changes nothing and uninstall removes exactly what install added. A file
nothing else changed since the install is given back byte for byte from its backup (`restored`).
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

from nmemd.errors import SettingsError
from nmemd.setup import files

CLIENT_MARKER = "nmem_client/send.py"
MCP_NAME = "nmem"


class HookSpec(msgspec.Struct, frozen=True):
    event: str
    matcher: str | None = None
    timeout: int = 10
    run_async: bool = False


def install_root() -> Path:
    """The folder that holds the nmemd and nmem_client packages (a checkout, or site-packages)."""
    return Path(__file__).resolve().parents[2]


def hook_command(agent: str | None = None) -> str:
    """The fastest way to start the client: the real interpreter, isolated, no site; naming the agent
    (`--agent NAME`) for any but Claude Code.

    SIGTERM is ignored from before Python starts (an ignored signal stays ignored across
    exec): when Claude Code exits it terminates the hooks still running, and a client
    killed while Python starts would lose its event. The client then handles SIGTERM itself
    (nmem_client.send): it stops waiting on the daemon and puts the event in the inbox.
    """
    client = install_root() / "nmem_client" / "send.py"
    argv = [sys.executable, "-I", "-S", str(client), *(["--agent", agent] if agent else [])]
    return guarded(argv)


def guarded(argv: list[str]) -> str:
    """The hook command for the client `argv` (python, -I, -S, send.py[, --agent, NAME]), which does
    nothing, silently and with exit 0, once that installation is gone (`pipx uninstall` before
    `nmem uninstall`): POSIX sh whose `[` is a builtin, so the check costs two stat calls and no
    process. The payload is read and dropped (`cat`), so the agent never writes into a closed pipe
    (issue #37, 2: every hook failed with exit 127)."""
    python, client = shlex.quote(argv[0]), shlex.quote(argv[3])
    return f"{_TRAP_ONLY}[ -f {client} ] && [ -x {python} ] || exec cat >/dev/null; exec {shlex.join(argv)}"


def mcp_command() -> str:
    return str(Path(sys.executable).parent / "nmem-mcp")


def mcp_args() -> list[str]:
    """Claude Code's MCP server is the bridge run as the hooks run the client (`hook_command`):
    without `site`, whose .pth files (an editable install's finder most of all) cost 5-10 ms of CPU
    while Claude Code starts, on the cores its start and SessionStart hook share."""
    return ["-I", "-S", str(install_root() / "nmem_client" / "bridge.py")]


_TRAP_ONLY: Final = "trap '' TERM; "
_TRAP: Final = _TRAP_ONLY + "exec "
_AGENT_NAME: Final = re.compile(r"[a-z][a-z-]*")


def is_our_command(command: object) -> bool:
    """Whether `command` is a hook command nmem wrote: exactly `hook_command`'s form (`guarded`) or an
    older one, `[trap '' TERM; exec ]PYTHON -I -S .../nmem_client/send.py[ --agent NAME]`, as nmem
    quotes it, not merely a command that mentions the client (issue #28, finding 10)."""
    if not isinstance(command, str):
        return False
    last = command.rpartition("; exec ")[2]
    if command.startswith(_TRAP_ONLY + "[ ") and _plain_command(last):
        return command == guarded(shlex.split(last))
    return _plain_command(command.removeprefix(_TRAP))


def _plain_command(body: str) -> bool:
    """`PYTHON -I -S .../nmem_client/send.py[ --agent NAME]`, exactly as nmem quotes it."""
    try:
        argv = shlex.split(body)
    except ValueError:
        return False
    tail: list[str] = []
    if len(argv) == 6 and argv[4] == "--agent" and _AGENT_NAME.fullmatch(argv[5]):
        argv, tail = argv[:4], argv[4:]
    return (
        len(argv) == 4
        and argv[0].startswith("/")
        and argv[1:3] == ["-I", "-S"]
        and argv[3].startswith("/")
        and argv[3].endswith("/" + CLIENT_MARKER)
        and shlex.join(argv + tail) == body  # quoted as nmem quotes: nothing else hides in it
    )


def is_our_handler(handler: Any) -> bool:
    """A hook handler nmem wrote (its exact command), not a user's that merely mentions the client."""
    return isinstance(handler, dict) and is_our_command(handler.get("command"))


def our_handlers(settings: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(event, group, handler) of each of nmem's handlers in hooks grouped as Claude Code's are,
    `{"hooks": {"<Event>": [{"matcher": ..., "hooks": [handler]}]}}` (Codex's and the Gemini CLI's too);
    anything of another shape is passed over."""
    hooks = settings.get("hooks")
    found = []
    for event, groups in hooks.items() if isinstance(hooks, dict) else ():
        for group in groups if isinstance(groups, list) else []:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            found += [(event, group, h) for h in handlers if is_our_handler(h)] if isinstance(handlers, list) else []
    return found


def handler(spec: HookSpec, command: str) -> dict[str, Any]:
    """One hook handler of nmem's, as settings.json and the plugin's hooks.json hold it."""
    out: dict[str, Any] = {"type": "command", "command": command, "timeout": spec.timeout}
    if spec.run_async:
        out["async"] = True
    return out


def load(path: Path) -> dict[str, Any]:
    """Read a settings file; a missing file is `{}`, anything but a JSON object is an error."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise SettingsError(f"cannot read {path}: {exc.strerror}") from exc
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path} holds a JSON {type(data).__name__}, not an object")
    return data


def _hooks_of(settings: dict[str, Any], path: Path) -> dict[str, Any]:
    hooks = settings.get("hooks", {})
    if not isinstance(hooks, dict):
        raise SettingsError(f'{path}: "hooks" is not an object')
    return hooks


def with_hooks(settings: dict[str, Any], path: Path, command: str, specs: tuple[HookSpec, ...]) -> dict[str, Any]:
    """A copy of `settings` with nmem's handlers present once, current, and nothing else changed."""
    merged = copy.deepcopy(settings)
    hooks = _hooks_of(merged, path)
    for spec in specs:
        groups = hooks.setdefault(spec.event, [])
        if not isinstance(groups, list):
            raise SettingsError(f"{path}: hooks.{spec.event} is not a list")
        wanted = handler(spec, command)
        found = False
        for group in groups:
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                continue
            for i, existing in enumerate(group["hooks"]):
                if is_our_handler(existing):
                    if found:
                        group["hooks"][i] = None  # a second copy from an older install
                    else:
                        group["hooks"][i] = wanted
                        if spec.matcher is not None:
                            group["matcher"] = spec.matcher
                        found = True
            group["hooks"] = [h for h in group["hooks"] if h is not None]
        hooks[spec.event] = [g for g in groups if not (isinstance(g, dict) and g.get("hooks") == [])]
        if not found:
            group = {"matcher": spec.matcher, "hooks": [wanted]} if spec.matcher is not None else {"hooks": [wanted]}
            hooks[spec.event].append(group)
    merged["hooks"] = hooks
    return merged


def with_groups_of_ours(
    settings: dict[str, Any], path: Path, specs: Iterable[HookSpec], handler_of: Callable[[HookSpec], dict[str, Any]]
) -> dict[str, Any]:
    """A copy of `settings` with nmem's handlers present once, current, each in a group of its own after
    every other (Codex's and the Gemini CLI's form: no other hook's position moves)."""
    merged = without_hooks(settings, path)
    hooks = merged.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SettingsError(f'{path}: "hooks" is not an object')
    for spec in specs:
        groups = hooks.setdefault(spec.event, [])
        if not isinstance(groups, list):
            raise SettingsError(f"{path}: hooks.{spec.event} is not a list")
        group: dict[str, Any] = {"hooks": [handler_of(spec)]}
        if spec.matcher is not None:
            group["matcher"] = spec.matcher
        groups.append(group)
    return merged


def without_hooks(settings: dict[str, Any], path: Path) -> dict[str, Any]:
    """A copy of `settings` with every nmem handler removed (and containers it emptied)."""
    cleaned = copy.deepcopy(settings)
    if "hooks" not in cleaned:
        return cleaned
    hooks = _hooks_of(cleaned, path)
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                before = len(group["hooks"])
                group["hooks"] = [h for h in group["hooks"] if not is_our_handler(h)]
                if before and not group["hooks"]:
                    continue
            kept.append(group)
        if groups and not kept:
            del hooks[event]
        else:
            hooks[event] = kept
    if not hooks:
        del cleaned["hooks"]
    return cleaned


def uninstall_hooks(path: Path, specs: tuple[HookSpec, ...]) -> Written:
    """Take nmem's handlers (installed as `specs`) out of a settings file in Claude Code's form (the file
    before the install when nothing else changed it since: `restored`)."""
    command = hook_command()
    undo = Undo(lambda d: with_hooks(d, path, command, specs), lambda d: without_hooks(d, path))
    return write(path, without_hooks(load(path), path), undo)


def uninstall_mcp(path: Path) -> Written:
    """Take nmem's MCP server out of a file of `mcpServers` (`~/.claude.json`), as `uninstall_hooks` does
    its handlers."""
    undo = Undo(lambda d: with_mcp(d, path, sys.executable, mcp_args()), lambda d: without_mcp(d, path))
    return write(path, without_mcp(load(path), path), undo)


def with_server(data: dict[str, Any], path: Path, entry: dict[str, Any], key: str = "mcpServers") -> dict[str, Any]:
    """A copy of `data` with `mcpServers.nmem` set to `entry` (Claude Code's, the Gemini CLI's, Copilot's
    and Cursor's files share the form; OpenCode's names the object `mcp`)."""
    merged = copy.deepcopy(data)
    servers = merged.setdefault(key, {})
    if not isinstance(servers, dict):
        raise SettingsError(f'{path}: "{key}" is not an object')
    servers[MCP_NAME] = entry
    return merged


def with_mcp(state: dict[str, Any], path: Path, command: str, args: list[str] | None = None) -> dict[str, Any]:
    return with_server(state, path, {"type": "stdio", "command": command, "args": list(args or []), "env": {}})


def without_mcp(state: dict[str, Any], path: Path | None = None, key: str = "mcpServers") -> dict[str, Any]:
    """A copy of `state` without `mcpServers.nmem` (or `<key>.nmem`), and without the object it emptied."""
    cleaned = copy.deepcopy(state)
    servers = cleaned.get(key)
    if isinstance(servers, dict) and MCP_NAME in servers:
        del servers[MCP_NAME]
        if not servers:
            del cleaned[key]
    return cleaned


_ESCAPED: Final = re.compile(r"\\u(?:00[89a-fA-F][0-9a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{3})")
_INDENT: Final = re.compile(r"\A\s*[{\[]\r?\n([ \t]+)\S")


def render(data: dict[str, Any], like: str = "") -> str:
    """`data` as JSON in the style of `like` (the file's old text): its indentation, and its non-ASCII
    characters as `\\u` escapes when it wrote them so; 2 spaces and the characters themselves by default."""
    indent: int | str = 2
    if found := _INDENT.match(like):
        indent = found.group(1) if "\t" in found.group(1) else len(found.group(1))
    escaped = bool(_ESCAPED.search(like)) and like.isascii()
    return json.dumps(data, indent=indent, ensure_ascii=escaped) + "\n"


@dataclass(frozen=True)
class Undo:
    """What an install does to a file's content (`add`) and what its uninstall does (`remove`): how an
    uninstall knows a backup holds the file as it was before an install nothing changed since."""

    add: Callable[[dict[str, Any]], dict[str, Any]]
    remove: Callable[[dict[str, Any]], dict[str, Any]]


class Written(msgspec.Struct, frozen=True):
    changed: bool
    backup: Path | None = None


@dataclass
class HooksAndMcp:
    """What an install or uninstall writes for an agent that keeps its hooks and its MCP servers in
    two JSON files of its own (Copilot CLI, Cursor)."""

    hooks: Path
    hooks_data: dict[str, Any]
    mcp: Path
    mcp_data: dict[str, Any] | None  # None: leave the MCP file alone
    hooks_undo: Undo | None = None  # an uninstall's: give back the file as it was before the install
    mcp_undo: Undo | None = None

    def apply(self, uninstall: bool = False) -> tuple[Written, Written]:
        """Write what the plan changes (both files backed up first); on uninstall a missing file stays missing."""
        none = Written(changed=False)
        missing = uninstall and not self.hooks.exists() and not self.hooks.is_symlink()
        hooks = none if missing else write(self.hooks, self.hooks_data, self.hooks_undo)
        mcp = none if self.mcp_data is None else write(self.mcp, self.mcp_data, self.mcp_undo)
        return hooks, mcp

    def printed(self) -> str:
        out = f"# {self.hooks}\n{render(self.hooks_data)}"
        if self.mcp_data is not None:
            out += f"# {self.mcp}: mcpServers.{MCP_NAME}\n"
            out += render({"mcpServers": {MCP_NAME: self.mcp_data["mcpServers"][MCP_NAME]}})
        return out


def backup_previous(path: Path, old: str | bytes) -> Path:
    """A new 0600 copy of `path`'s previous content (settings files hold tokens); every earlier one is kept."""
    return files.backup(path, old.encode("utf-8") if isinstance(old, str) else old)


def _original(path: Path, undo: Undo) -> tuple[bytes, dict[str, Any]] | None:
    """The newest backup of `path` that holds nothing of nmem's (the file before its install): bytes, content."""
    for copy_path in files.backups(path):
        try:
            old = copy_path.read_bytes()
            before = json.loads(old) if old.strip() else {}
        except (OSError, ValueError):
            continue
        try:
            if isinstance(before, dict) and undo.remove(before) == before:
                return old, before
        except SettingsError:
            return None
    return None


def restored(path: Path, data: dict[str, Any], undo: Undo) -> bytes | None:
    """The bytes of the file as it was before nmem's install, when an uninstall leaves `data` (the file
    now, nmem's entries removed) and nothing else changed since that install: the newest backup that
    holds nothing of nmem's, if installing into it and uninstalling again gives `data`. None otherwise
    (the uninstall then edits the file: nmem's entries out, the rest as it is now)."""
    original = _original(path, undo)
    try:
        return original[0] if original is not None and undo.remove(undo.add(original[1])) == data else None
    except SettingsError:
        return None


def _hollow(value: Any) -> bool:
    """An empty list or object, or an object of only such: what holds no entry of anyone's."""
    return value in ([], {}) or (isinstance(value, dict) and all(_hollow(v) for v in value.values()))


def with_empties(data: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """`data` with the empty containers `before` had where `data` has none (the user's own
    `"hooks": {"Stop": []}` that nmem's entry filled and its removal took away), at every depth."""
    out = copy.deepcopy(data)
    order = list(before)
    for i, (key, value) in enumerate(before.items()):
        if key not in out and _hollow(value):
            after = next((k for k in reversed(order[:i]) if k in out), None)  # where it was, among the keys left
            items = list(out.items())
            at = 0 if after is None else [k for k, _ in items].index(after) + 1
            out = dict([*items[:at], (key, copy.deepcopy(value)), *items[at:]])
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = with_empties(out[key], value)
    return out


def write(path: Path, data: dict[str, Any], undo: Undo | None = None) -> Written:
    """Write atomically after backing up the old file; unchanged content is not rewritten. A symlink
    stays one (its target is written); a read-only or another user's file is refused. With `undo`
    (an uninstall), a file unchanged since the install gets back its old bytes (`restored`)."""
    real = files.target(path)
    backup: Path | None = None
    try:
        try:
            old: bytes | None = real.read_bytes()
        except FileNotFoundError:
            old = None
        text = old.decode("utf-8", "replace") if old is not None else ""
        new = render(data, text).encode("utf-8")
        if old is not None:
            try:
                same = bool(text.strip()) and json.loads(text) == data
            except ValueError:
                same = False
            if same:
                return Written(changed=False)
            if undo is not None:
                before = restored(path, data, undo)
                original = _original(path, undo) if before is None else None
                if original is not None:  # edited since: the user's own empty containers stay, at least
                    data = with_empties(data, original[1])
                    new = render(data, text).encode("utf-8")
                new = new if before is None else before
            backup = backup_previous(path, old)
        files.replace(real, new)
    except OSError as exc:
        raise SettingsError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return Written(changed=True, backup=backup)
