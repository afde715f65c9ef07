"""nmem's hooks, their trust and its MCP server in the OpenAI Codex CLI's configuration, and out again.

`$CODEX_HOME/hooks.json` gets nmem's handlers (each in a group of its own, after every other tool's, so no
other hook's position, and hence its trust key, moves); `$CODEX_HOME/config.toml` gets `[mcp_servers.nmem]`
and, for each of nmem's handlers, the `[hooks.state."<key>"] trusted_hash` Codex's `/hooks` would record when
the user trusts it (README.md says how Codex computes both): without it Codex skips the hooks silently. Only
what nmem wrote is trusted, by the hash of exactly what it wrote. Everything else in both files is kept; both
are backed up before a change; uninstall removes exactly nmem's handlers, tables and trust entries.

config.toml is edited as text (Python reads TOML but has no writer): nmem's tables are removed by their header
and written again at the end of the file, and the result must parse as TOML holding everything the file held
before, or nothing is written.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Final

from nmemd.agents.codex import HOME, SPEC, history
from nmemd.errors import NmemError, SettingsError
from nmemd.setup import files, settings_file
from nmemd.setup.agent_checks import mcp_executable
from nmemd.setup.agent_setup import AgentSetup, Installed, InstallOptions, looked_for, outcome
from nmemd.setup.checks import Check, command_paths, fail, home_tilde, ok, warn
from nmemd.setup.settings_file import HookSpec, Written

AGENT: Final = SPEC.name
MCP_NAME: Final = settings_file.MCP_NAME
# Every hook is synchronous: `codex exec` may end before a background hook has run, and the client
# costs a few milliseconds over Python's own start. SessionEnd's timeout is clamped to 1-3 s by Codex.
HOOKS: Final = tuple(HookSpec(e, timeout=3 if e == "SessionEnd" else 10) for e in SPEC.hooks)
LABELS: Final = {
    "PreToolUse": "pre_tool_use", "PermissionRequest": "permission_request", "PostToolUse": "post_tool_use",
    "PreCompact": "pre_compact", "PostCompact": "post_compact", "SessionStart": "session_start",
    "SessionEnd": "session_end", "UserPromptSubmit": "user_prompt_submit", "SubagentStart": "subagent_start",
    "SubagentStop": "subagent_stop", "Stop": "stop",
}  # fmt: skip
_NO_MATCHER: Final = frozenset({"UserPromptSubmit", "Stop"})  # Codex ignores their matcher
_HEADER: Final = re.compile(r"^\s*\[(?!\[)(.+?)\]\s*(?:#.*)?$")
_ARRAY_HEADER: Final = re.compile(r"^\s*\[\[")


codex_home: Final = HOME.path


def hooks_path() -> Path:
    return codex_home() / "hooks.json"


def config_path() -> Path:
    return codex_home() / "config.toml"


hook_command: Final = functools.partial(settings_file.hook_command, AGENT)


# --- trust ---------------------------------------------------------------------------------------


def _normalized(event: str, handler: dict[str, Any]) -> dict[str, Any]:
    """The handler as Codex hashes it: `timeout` and `async` always there, `command_windows` never,
    SessionEnd's timeout clamped to 1-3 s (codex-rs/hooks/src/engine/discovery.rs)."""
    timeout = handler.get("timeout")
    timeout = timeout if isinstance(timeout, int) and not isinstance(timeout, bool) and timeout >= 0 else None
    if event == "SessionEnd":
        timeout = min(max(timeout if timeout is not None else 1, 1), 3)
    else:
        timeout = max(timeout if timeout is not None else 600, 1)
    out: dict[str, Any] = {"type": "command", "command": handler.get("command"), "timeout": timeout,
                           "async": handler.get("async") is True}  # fmt: skip
    if isinstance(handler.get("statusMessage"), str):
        out["statusMessage"] = handler["statusMessage"]
    return out


def trusted_hash(event: str, matcher: str | None, handler: dict[str, Any]) -> str:
    """What Codex records as a command hook's `trusted_hash` (codex-rs/config/src/fingerprint.rs):
    SHA-256 of the compact JSON, keys sorted, of the event's label, the group's matcher (absent when
    none) and the one normalized handler."""
    identity: dict[str, Any] = {"event_name": LABELS[event], "hooks": [_normalized(event, handler)]}
    if matcher is not None and event not in _NO_MATCHER:
        identity["matcher"] = matcher
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def state_key(path: Path, event: str, group: int, index: int) -> str:
    """Codex's key for a hook's state: the hooks file, the event's label and the hook's position."""
    return f"{path}:{LABELS[event]}:{group}:{index}"


def our_handlers(data: dict[str, Any], path: Path) -> list[tuple[str, str]]:
    """(state key, trusted hash) of each of nmem's handlers in a hooks.json's content."""
    hooks = data.get("hooks")
    found: list[tuple[str, str]] = []
    for event, groups in hooks.items() if isinstance(hooks, dict) else ():
        if event not in LABELS or not isinstance(groups, list):
            continue
        for gi, group in enumerate(groups):
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for hi, handler in enumerate(handlers if isinstance(handlers, list) else []):
                if settings_file.is_our_handler(handler):
                    matcher = group.get("matcher") if isinstance(group.get("matcher"), str) else None
                    found.append((state_key(path, event, gi, hi), trusted_hash(event, matcher, handler)))
    return found


# --- hooks.json ----------------------------------------------------------------------------------


def with_hooks(data: dict[str, Any], path: Path, command: str) -> dict[str, Any]:
    """hooks.json's content with nmem's handlers present once, current, each in its own group after
    the others', everything else as it was."""
    return settings_file.with_groups_of_ours(data, path, HOOKS, lambda spec: settings_file.handler(spec, command))


def without_hooks(data: dict[str, Any], path: Path) -> dict[str, Any]:
    cleaned = settings_file.without_hooks(data, path)
    if cleaned.get("hooks") == {}:
        del cleaned["hooks"]
    return cleaned


# --- config.toml ---------------------------------------------------------------------------------


def load_config(path: Path) -> tuple[str, dict[str, Any]]:
    """config.toml's text and content; a missing file is empty; anything but TOML is a SettingsError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return "", {}
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path} is not valid TOML: {exc}") from None


def _header_path(header: str) -> tuple[str, ...] | None:
    """The key path a table header names (`mcp_servers.nmem` -> ("mcp_servers", "nmem"))."""
    try:
        node: Any = tomllib.loads(f"[{header}]\n")
    except tomllib.TOMLDecodeError:
        return None
    keys: list[str] = []
    while isinstance(node, dict) and len(node) == 1:
        key, node = next(iter(node.items()))
        keys.append(key)
    return tuple(keys)


def _is_ours(table: tuple[str, ...], keys: set[str], hashes: set[str], config: dict[str, Any], mcp: bool) -> bool:
    if table[:2] == ("mcp_servers", MCP_NAME):
        return mcp
    if len(table) == 3 and table[:2] == ("hooks", "state"):
        state = toml_table(toml_table(config, "hooks"), "state").get(table[2])
        return table[2] in keys or (isinstance(state, dict) and state.get("trusted_hash") in hashes)
    return False


def without_tables(text: str, config: dict[str, Any], keys: set[str], hashes: set[str], mcp: bool = True) -> str:
    """`text` without nmem's tables: `[mcp_servers.nmem]` and its subtables (when `mcp`), and the
    `[hooks.state."<key>"]` tables of `keys` or trusting one of `hashes`; and its comment line."""
    kept: list[str] = []
    between: list[str] = []  # comments and blank lines after a dropped table: the next table's, if kept
    dropping = False
    for line in text.splitlines(keepends=True):
        header = _HEADER.match(line)
        if header or _ARRAY_HEADER.match(line):
            table = _header_path(header.group(1)) if header else None
            dropping = table is not None and _is_ours(table, keys, hashes, config, mcp)
            if not dropping:
                kept += between
            between = []
        if line.startswith(_COMMENT):
            continue
        if not dropping:
            kept.append(line)
        elif not line.strip() or line.lstrip().startswith("#"):
            between.append(line)
        else:
            between = []
    out = "".join(kept).lstrip("\n")  # the blank lines that followed nmem's own first lines
    out = "\n" * (len(text) - len(text.lstrip("\n"))) + out  # but not the file's own
    return out.rstrip("\n") + "\n" if out.strip() else ""


def _without_ours(config: dict[str, Any], keys: set[str], hashes: set[str], mcp: bool) -> dict[str, Any]:
    """`config` minus nmem's entries (what `without_tables` removes), empty tables dropped: what must
    come out of an edit unchanged."""
    out = json.loads(json.dumps(config, default=str))  # a deep copy (TOML dates as text: compared alike)
    servers = toml_table(out, "mcp_servers")
    if mcp:
        servers.pop(MCP_NAME, None)
    state = toml_table(toml_table(out, "hooks"), "state")
    for key in list(state):
        entry = state[key]
        if key in keys or (isinstance(entry, dict) and entry.get("trusted_hash") in hashes):
            del state[key]
    pruned: dict[str, Any] = _pruned(out)
    return pruned


def _pruned(value: Any) -> Any:
    if isinstance(value, dict):
        pruned = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v != {}}
    return value


def toml_table(data: dict[str, Any], key: str) -> dict[str, Any]:
    """`data[key]` when it is a table, else {} (a hand-edited config may hold anything there)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _toml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string


_COMMENT: Final = "# nmem (`nmem install --agent codex`"


def our_tables(handlers: list[tuple[str, str]], mcp: str | None) -> str:
    parts = [f"{_COMMENT}; `nmem uninstall --agent codex` removes these tables): its MCP server and the"
             " trust of its hooks in hooks.json"]  # fmt: skip
    if mcp is not None:
        parts.append(f"[mcp_servers.{MCP_NAME}]\ncommand = {_toml_string(mcp)}\nargs = []")
    for key, digest in handlers:
        parts.append(f"[hooks.state.{_toml_string(key)}]\ntrusted_hash = {_toml_string(digest)}")
    return "\n\n".join(parts) + "\n"


def _checked(
    path: Path, before: dict[str, Any], text: str, handlers: list[tuple[str, str]], mcp: str | None,
    manage_mcp: bool, keys: set[str], hashes: set[str],
) -> str:  # fmt: skip
    """`text` when it parses, holds nmem's tables as written (`handlers`' trust, the MCP server running
    `mcp` when given) and everything else as `before` held it (nmem's MCP server included unless
    `manage_mcp`); a SettingsError naming the problem if not."""
    try:
        after = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(
            f"{path}: nmem cannot edit its tables in this file ({exc}), nothing was changed; it may define"
            " [mcp_servers] or [hooks] inline: edit them by hand (`nmem install --agent codex --print` shows them)"
        ) from None
    state = toml_table(toml_table(after, "hooks"), "state")
    server = toml_table(after, "mcp_servers").get(MCP_NAME)
    if any(toml_table(state, k).get("trusted_hash") != h for k, h in handlers) or (
        mcp is not None and server != {"command": mcp, "args": []}
    ):
        raise SettingsError(f"{path}: nmem's tables did not come out as written; nothing was changed")
    if manage_mcp and mcp is None and server is not None:
        raise SettingsError(f"{path}: nmem could not remove [mcp_servers.{MCP_NAME}]; nothing was changed")
    ours = keys | {k for k, _ in handlers}
    if _without_ours(after, ours, hashes, manage_mcp) != _without_ours(before, ours, hashes, manage_mcp):
        raise SettingsError(f"{path}: editing it as text would change more than nmem's tables; nothing was changed")
    return text


def with_config(
    text: str, config: dict[str, Any], path: Path, handlers: list[tuple[str, str]], old: list[tuple[str, str]],
    mcp: str | None,
) -> str:  # fmt: skip
    """config.toml's text with nmem's MCP server (None: its tables left as they are) and the trust of
    `handlers`, replacing what an earlier install wrote (`old`: the trust of the handlers it replaces)."""
    keys = {k for k, _ in handlers} | {k for k, _ in old}
    hashes = {h for _, h in handlers} | {h for _, h in old}
    rest = without_tables(text, config, keys, hashes, mcp=mcp is not None)
    new = (rest.rstrip("\n") + "\n\n" if rest.strip() else "") + our_tables(handlers, mcp)
    return _checked(path, config, new, handlers, mcp, mcp is not None, keys, hashes)


def write_text(path: Path, old: str, text: str) -> Written:
    """Write `text` atomically after a 0600 backup of the old content; unchanged content is not rewritten.
    A symlink stays one; a read-only or another user's file is refused (nmemd.setup.files)."""
    real = files.target(path)
    if text == old and (real.exists() or not text):
        return Written(changed=False)
    backup: Path | None = None
    try:
        if real.exists():
            backup = settings_file.backup_previous(path, real.read_bytes())
        files.replace(real, text.encode("utf-8"))
    except OSError as exc:
        raise SettingsError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return Written(changed=True, backup=backup)


# --- the two commands ----------------------------------------------------------------------------


class Plan:
    """What install or uninstall will write: both files' new content, computed before either is written."""

    def __init__(self) -> None:
        self.hooks = hooks_path()
        self.config = config_path()
        self.hooks_data: dict[str, Any] = {}
        self.config_text = ""
        self.config_old = ""
        self.handlers: list[tuple[str, str]] = []
        self.undo: settings_file.Undo | None = None  # an uninstall's (settings_file.restored)


def plan_install(mcp: bool = True) -> Plan:
    plan = Plan()
    old = settings_file.load(plan.hooks)
    plan.hooks_data = with_hooks(old, plan.hooks, hook_command())
    plan.handlers = our_handlers(plan.hooks_data, plan.hooks)
    plan.config_old, config = load_config(plan.config)
    previous = our_handlers(old, plan.hooks)
    plan.config_text = with_config(
        plan.config_old, config, plan.config, plan.handlers, previous, settings_file.mcp_command() if mcp else None
    )
    return plan


def plan_uninstall(mcp: bool = True) -> Plan:
    plan = Plan()
    old = settings_file.load(plan.hooks)
    plan.hooks_data = without_hooks(old, plan.hooks)
    path, command = plan.hooks, hook_command()
    plan.undo = settings_file.Undo(lambda d: with_hooks(d, path, command), lambda d: without_hooks(d, path))
    previous = our_handlers(old, plan.hooks)
    ours = our_handlers(with_hooks({}, plan.hooks, hook_command()), plan.hooks)  # this install's, wherever they are
    plan.config_old, config = load_config(plan.config)
    keys = {k for k, _ in previous}
    hashes = {h for _, h in previous} | {h for _, h in ours}
    if plan.config_old:
        text = without_tables(plan.config_old, config, keys, hashes, mcp)
        plan.config_text = _checked(plan.config, config, text, [], None, mcp, keys, hashes)
        remaining = toml_table(toml_table(tomllib.loads(text), "hooks"), "state")
        if any(k in remaining for k in keys):
            raise SettingsError(f"{plan.config}: nmem could not remove the trust of its hooks; nothing was changed")
    return plan


def apply(plan: Plan) -> tuple[Written, Written]:
    """Write hooks.json, then config.toml. An uninstall gives hooks.json back as it was before the
    install when nothing else changed it since; a hooks.json nmem made that holds nothing more is removed."""
    undo = plan.undo
    exists = plan.hooks.exists() or plan.hooks.is_symlink()
    keep = plan.hooks_data or plan.hooks.is_symlink()
    if keep or (undo and exists and settings_file.restored(plan.hooks, {}, undo) is not None):
        hooks = settings_file.write(plan.hooks, plan.hooks_data, undo)
    elif exists:
        real = files.target(plan.hooks)
        try:
            backup = settings_file.backup_previous(plan.hooks, real.read_bytes())
            real.unlink()
        except OSError as exc:
            raise SettingsError(f"cannot remove {plan.hooks}: {exc.strerror or exc}") from exc
        hooks = Written(changed=True, backup=backup)
    else:
        hooks = Written(changed=False)
    return hooks, write_text(plan.config, plan.config_old, plan.config_text)


def printed(plan: Plan) -> str:
    return f"# {plan.hooks}\n{settings_file.render(plan.hooks_data)}# {plan.config}\n{plan.config_text}"


# --- what `nmem install`, `nmem uninstall` and `nmem doctor` do for Codex ------------------------


def _install(o: InstallOptions) -> Installed:
    plan = plan_install(mcp=o.mcp)
    if o.print_only:
        return Installed(printed=printed(plan))
    hooks_written, config_written = apply(plan)
    what = "trust of nmem's hooks" + (f" and MCP server '{MCP_NAME}'" if o.mcp else "")
    lines = [f"Codex hooks: {plan.hooks} ({outcome(hooks_written)})",
             f"Codex {what}: {plan.config} ({outcome(config_written)})"]  # fmt: skip
    if os.path.isdir(history.sessions_root()):
        lines.append("import your existing Codex history with: nmem import-transcripts")
    return Installed(lines=lines)


def _uninstall(o: InstallOptions) -> list[str]:
    plan = plan_uninstall(mcp=o.mcp)
    hooks_written, config_written = apply(plan)
    lines = [f"Codex hooks removed from {plan.hooks}" if hooks_written.changed else f"no nmem hooks in {plan.hooks}"]
    if config_written.changed:
        what = "trust of nmem's hooks" + (f" and MCP server '{MCP_NAME}'" if o.mcp else "")
        lines.append(f"Codex {what} removed from {plan.config}")
    return lines


def installed_hooks() -> list[tuple[str, str, str]]:
    """(event, command, group matcher or "") of nmem's handlers in Codex's hooks.json; [] when unreadable."""
    try:
        data = settings_file.load(hooks_path())
    except NmemError:
        return []
    return [(e, str(h.get("command", "")), str(g.get("matcher") or "")) for e, g, h in settings_file.our_handlers(data)]


def check() -> list[Check]:
    """Codex's hooks (all of nmem's events, a client that exists, trusted by Codex) and MCP server;
    nothing when nmem is not installed for Codex."""
    hooks_file, config_file = hooks_path(), config_path()
    try:
        data = settings_file.load(hooks_file)
        _, config = load_config(config_file)
    except NmemError as exc:
        return [fail("codex", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    handlers = our_handlers(data, hooks_file)
    mcp = toml_table(toml_table(config, "mcp_servers"), MCP_NAME)
    if not handlers and not mcp:
        return []  # not installed for Codex (on purpose, perhaps): nothing to check
    fix = "nmem install --agent codex"
    where = home_tilde(hooks_file)
    events = {e for e, _, _ in installed_hooks()}
    missing = [h.event for h in HOOKS if h.event not in events]
    checks: list[Check] = []
    commands = {c for _, c, _ in installed_hooks()}
    broken = sorted({p for c in commands for p in command_paths(c) if not os.path.exists(p)})
    state = toml_table(toml_table(config, "hooks"), "state")
    untrusted = [k for k, h in handlers if toml_table(state, k).get("trusted_hash") != h]
    disabled = [k for k, _ in handlers if toml_table(state, k).get("enabled") is False]
    if not handlers:
        checks.append(fail("codex hooks", f"no nmem hooks in {where}", fix))
    elif missing:
        checks.append(fail("codex hooks", f"{where} lacks nmem hooks for {', '.join(missing)}", fix))
    elif broken:
        checks.append(fail("codex hooks", f"hooks in {where} call {broken[0]}, which does not exist", fix))
    elif untrusted:
        checks.append(fail("codex hooks", f"Codex skips {len(untrusted)} of nmem's {len(handlers)} hooks: not"
                            f" trusted in {home_tilde(config_file)} (changed since they were trusted?)",
                            fix + "  # or trust them in Codex's /hooks"))  # fmt: skip
    elif disabled:
        checks.append(warn("codex hooks", f"{len(disabled)} of nmem's hooks are disabled in Codex's /hooks",
                            "enable them in Codex's /hooks"))  # fmt: skip
    elif any(c != hook_command() for c in commands):
        checks.append(warn("codex hooks", f"hooks in {where} call another nmem installation than this one", fix))
    else:
        checks.append(ok("codex hooks", f"{len(handlers)} hook events in {where}, trusted"))
    command = str(mcp.get("command", "")) if mcp else None
    key, where = f"[mcp_servers.{MCP_NAME}]", home_tilde(config_file)
    return [*checks, mcp_executable("codex mcp", key, command, where, fix)]


SETUP: Final = AgentSetup(
    found=HOME.found,
    looked=looked_for(HOME),
    install=_install,
    uninstall=_uninstall,
    checks=(("codex", lambda settings: check()),),
    hooked=lambda: bool(installed_hooks()),
    project_refusal="--project is for Claude Code: Codex reads its hooks from $CODEX_HOME (default ~/.codex)",
)
