"""nmem's plugin and MCP server in OpenCode's user configuration, and out again.

OpenCode has no command hooks; it loads JavaScript plugins (README.md). `nmem install
--agent opencode` writes one, `~/.config/opencode/plugin/nmem.js` (`$XDG_CONFIG_HOME/opencode/...`):
a small file of nmem's own that pipes OpenCode's events as JSON to nmem's hook client
(`send.py --agent opencode`), and adds the SessionStart context to the session's system prompt. It
registers `mcp.nmem` running `nmem-mcp` in `~/.config/opencode/opencode.json`. Everything else is
kept; opencode.json is backed up before a change; uninstall removes exactly nmem.js (only when it is
nmem's: its first line says so) and `mcp.nmem`. OpenCode reads opencode.json with comments allowed:
a file with comments is not JSON to nmem, which then says so and changes nothing.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Final

from nmem_client import paths
from nmemd.agents.opencode import HOME, SPEC
from nmemd.agents.opencode.capture import config_dir, database
from nmemd.errors import NmemError, SettingsError
from nmemd.setup import files, settings_file
from nmemd.setup.agent_checks import mcp_executable
from nmemd.setup.agent_setup import AgentSetup, Installed, InstallOptions, looked_for, outcome
from nmemd.setup.checks import Check, fail, home_tilde, ok, warn
from nmemd.setup.settings_file import Written

AGENT: Final = SPEC.name
MCP_NAME: Final = settings_file.MCP_NAME
PLUGIN_NAME: Final = "nmem.js"
MARKER: Final = "// nmem: the OpenCode plugin of nmem"
START_WAIT_MS: Final = 8000  # the most the first model request waits for nmem's context

# The plugin. `SEND` is filled in at install; everything else is fixed. It never throws into OpenCode:
# a failed send is silent (the hook client itself never fails), a slow context is left out.
PLUGIN: Final = """\
__MARKER__ (written by `nmem install --agent opencode`; `nmem uninstall --agent opencode` removes it).
// Pipes OpenCode's events as JSON to nmem's hook client, with Claude Code's field names
// (README.md), and adds nmem's context to each session's system prompt.
const SEND = __SEND_ARGV__
const START_WAIT_MS = __START_WAIT_MS__

async function send(payload, waitMs) {
  try {
    const proc = Bun.spawn(SEND, { stdin: new Blob([JSON.stringify(payload)]), stdout: "pipe", stderr: "ignore" })
    const out = new Response(proc.stdout).text().then(async (text) => (await proc.exited, text))
    if (!waitMs) return await out
    let timer
    const late = new Promise((resolve) => { timer = setTimeout(() => resolve(""), waitMs) })
    try { return await Promise.race([out, late]) } finally { clearTimeout(timer) }
  } catch (e) {
    return ""
  }
}

function contextOf(out) {
  try {
    const reply = JSON.parse(out)
    const text = (reply.hookSpecificOutput || {}).additionalContext || reply.additionalContext
    return typeof text === "string" ? text : ""
  } catch (e) {
    return ""
  }
}

export const NmemPlugin = async ({ directory }) => {
  const starts = new Map()
  const lastText = new Map()
  const failed = new Set()
  const base = (event, sessionID) => ({ hook_event_name: event, session_id: sessionID, cwd: directory })
  const start = (sessionID, info) => {
    if (!starts.has(sessionID)) {
      const payload = { ...base("SessionStart", sessionID), source: "startup" }
      if (info && info.parentID) payload.parent_session_id = info.parentID
      starts.set(sessionID, send(payload, START_WAIT_MS).then(contextOf))
    }
    return starts.get(sessionID)
  }
  return {
    event: async ({ event }) => {
      const p = (event && event.properties) || {}
      if (event.type === "session.created" && p.info && p.info.id) {
        await start(p.info.id, p.info)
      } else if (event.type === "session.idle" && p.sessionID) {
        const reply = lastText.get(p.sessionID)
        lastText.delete(p.sessionID)
        await send({ ...base("Stop", p.sessionID), stop_hook_active: false, last_assistant_message: reply || "" })
      } else if (event.type === "session.compacted" && p.sessionID) {
        await send({ ...base("PostCompact", p.sessionID), trigger: "auto" })
      } else if (event.type === "message.part.updated" && p.part) {
        const part = p.part
        if (part.type === "text" && !part.synthetic && part.text && part.time && part.time.end) {
          lastText.set(part.sessionID, part.text)
        } else if (part.type === "tool" && part.state && part.state.status === "error" && !failed.has(part.callID)) {
          failed.add(part.callID)
          await send({ ...base("PostToolUseFailure", part.sessionID), tool_name: part.tool,
            tool_input: part.state.input || {}, tool_use_id: part.callID, error: String(part.state.error || "") })
        }
      }
    },
    "chat.message": async (input, output) => {
      const message = (output && output.message) || {}
      const parts = (output && output.parts) || []
      const text = parts.filter((t) => t.type === "text" && !t.synthetic && !t.ignored).map((t) => t.text).join("\\n")
      if (!text.trim()) return
      const sessionID = message.sessionID || input.sessionID
      const model = message.model ? `${message.model.providerID}/${message.model.modelID}` : undefined
      await send({ ...base("UserPromptSubmit", sessionID), prompt: text, prompt_id: message.id, model })
    },
    "tool.execute.after": async (input, output) => {
      const response = { title: output.title, output: output.output, metadata: output.metadata }
      await send({ ...base("PostToolUse", input.sessionID), tool_name: input.tool, tool_input: input.args || {},
        tool_use_id: input.callID, tool_response: response })
    },
    "experimental.chat.system.transform": async (input, output) => {
      if (!input || !input.sessionID) return
      const context = await start(input.sessionID)
      if (context) output.system.push(context)
    },
  }
}
"""


def plugin_dir() -> Path:
    return Path(config_dir()).absolute() / "plugin"


def plugin_path() -> Path:
    return plugin_dir() / PLUGIN_NAME


def config_path() -> Path:
    return Path(config_dir()).absolute() / "opencode.json"


def send_argv() -> list[str]:
    """How the plugin starts nmem's hook client: the real interpreter, isolated, no site."""
    client = settings_file.install_root() / "nmem_client" / "send.py"
    return [sys.executable, "-I", "-S", str(client), "--agent", AGENT]


def plugin_text(argv: list[str] | None = None) -> str:
    return (
        PLUGIN.replace("__MARKER__", MARKER, 1)
        .replace("__SEND_ARGV__", json.dumps(argv or send_argv()), 1)
        .replace("__START_WAIT_MS__", str(START_WAIT_MS), 1)
    )


def is_ours(text: str) -> bool:
    return text.startswith(MARKER)


def plugin_argv(text: str) -> list[str] | None:
    """The hook client command an installed nmem.js runs (None: not one of nmem's, or unreadable)."""
    if not is_ours(text):
        return None
    for line in text.splitlines():
        if line.startswith("const SEND = "):
            try:
                argv = json.loads(line.removeprefix("const SEND = "))
            except ValueError:
                return None
            return [str(a) for a in argv] if isinstance(argv, list) else None
    return None


def read_plugin(path: Path | None = None) -> str | None:
    """nmem.js's text; None when there is none. Raise SettingsError when it cannot be read."""
    path = path or plugin_path()
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc


def mcp_entry(data: dict[str, Any]) -> dict[str, Any] | None:
    servers = data.get("mcp")
    entry = servers.get(MCP_NAME) if isinstance(servers, dict) else None
    return entry if isinstance(entry, dict) else None


def with_mcp(data: dict[str, Any], path: Path, command: str) -> dict[str, Any]:
    return settings_file.with_server(data, path, {"type": "local", "command": [command], "enabled": True}, key="mcp")


def without_mcp(data: dict[str, Any]) -> dict[str, Any]:
    return settings_file.without_mcp(data, key="mcp")


class Plan:
    """What install or uninstall will write, computed before anything is written."""

    def __init__(self, plugin: str | None, old_plugin: str | None, config: dict[str, Any] | None,
                 old_config: dict[str, Any]) -> None:  # fmt: skip
        self.plugin_path = plugin_path()
        self.config_path = config_path()
        self.plugin = plugin  # None: remove nmem.js
        self.old_plugin = old_plugin
        self.config = config  # None: leave opencode.json alone
        self.old_config = old_config
        self.undo: settings_file.Undo | None = None  # an uninstall's (settings_file.restored)


def plan_install(mcp: bool = True) -> Plan:
    old_plugin = read_plugin()
    if old_plugin is not None and not is_ours(old_plugin):
        raise SettingsError(f"{plugin_path()} exists and is not nmem's: move it away, then install again")
    path = config_path()
    old = settings_file.load(path)
    config = with_mcp(old, path, settings_file.mcp_command()) if mcp else None
    return Plan(plugin_text(), old_plugin, config, old)


def plan_uninstall(mcp: bool = True) -> Plan:
    old_plugin = read_plugin()
    path = config_path()
    old = settings_file.load(path) if mcp else {}
    plan = Plan(None, old_plugin, without_mcp(old) if mcp else None, old)
    command = settings_file.mcp_command()
    plan.undo = settings_file.Undo(lambda d: with_mcp(d, path, command), without_mcp)
    return plan


def apply(plan: Plan) -> tuple[Written, Written | None]:
    """Write (or remove) nmem.js, then opencode.json (backup first). Only nmem's own nmem.js is removed."""
    if plan.plugin is None:
        if plan.old_plugin is not None and is_ours(plan.old_plugin):
            try:
                plan.plugin_path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise SettingsError(f"cannot remove {plan.plugin_path}: {exc.strerror}") from exc
            plugin_written = Written(changed=True)
        else:
            plugin_written = Written(changed=False)
    elif plan.plugin == plan.old_plugin:
        plugin_written = Written(changed=False)
    else:
        plugin_written = _write_plugin(plan.plugin_path, plan.plugin)
    config_written: Written | None = None
    if plan.config is not None:
        if plan.config == plan.old_config and (plan.config_path.exists() or not plan.config):
            config_written = Written(changed=False)
        else:
            config_written = settings_file.write(plan.config_path, plan.config, plan.undo)
    return plugin_written, config_written


def _write_plugin(path: Path, text: str) -> Written:
    try:
        paths.make_dirs(str(path.parent))  # not 0777 under umask 000: others could replace what OpenCode runs
        files.replace(path, text.encode("utf-8"), 0o644)
    except OSError as exc:
        raise SettingsError(f"cannot write {path}: {exc.strerror}") from exc
    return Written(changed=True)


def printed(plan: Plan) -> str:
    out = f"# {plan.plugin_path}\n{plan.plugin or ''}"
    if plan.config is not None:
        out += f"# {plan.config_path}\n{settings_file.render(plan.config)}"
    return out


# --- what `nmem install`, `nmem uninstall` and `nmem doctor` do for OpenCode ---------------------


def _install(o: InstallOptions) -> Installed:
    plan = plan_install(mcp=o.mcp)
    if o.print_only:
        return Installed(printed=printed(plan))
    plugin_written, config_written = apply(plan)
    lines = [f"OpenCode plugin: {plan.plugin_path} ({outcome(plugin_written)})"]
    if config_written is not None:
        lines.append(f"OpenCode MCP server '{MCP_NAME}': {plan.config_path} ({outcome(config_written)})")
    if os.path.isfile(database()):
        lines.append("import your existing OpenCode history with: nmem import-transcripts")
    return Installed(lines=lines)


def _uninstall(o: InstallOptions) -> list[str]:
    plan = plan_uninstall(mcp=o.mcp)
    plugin_written, config_written = apply(plan)
    lines = [f"OpenCode plugin removed: {plan.plugin_path}" if plugin_written.changed
             else f"no nmem plugin at {plan.plugin_path}"]  # fmt: skip
    if config_written is not None and config_written.changed:
        lines.append(f"OpenCode MCP server '{MCP_NAME}' removed from {plan.config_path}")
    return lines


def check() -> list[Check]:
    """OpenCode's plugin (nmem's nmem.js, current, a client that exists) and MCP server; nothing when
    nmem is not installed for OpenCode."""
    plugin_file, config_file = plugin_path(), config_path()
    try:
        text, data = read_plugin(plugin_file), settings_file.load(config_file)
    except NmemError as exc:
        return [fail("opencode", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    mcp = mcp_entry(data)
    if text is None and mcp is None:
        return []  # not installed for OpenCode (on purpose, perhaps): nothing to check
    fix, where = "nmem install --agent opencode", home_tilde(plugin_file)
    argv = plugin_argv(text) if text is not None else None
    checks: list[Check] = []
    if text is None:
        checks.append(fail("opencode plugin", f"no {where}", fix))
    elif argv is None:
        checks.append(fail("opencode plugin", f"{where} is not nmem's plugin", f"move it away, then {fix}"))
    elif missing := [a for a in argv[:1] + argv[3:4] if not os.path.exists(a)]:
        checks.append(fail("opencode plugin", f"{where} calls {missing[0]}, which does not exist", fix))
    elif text != plugin_text():
        checks.append(warn("opencode plugin", f"{where} is another nmem installation's or version's", fix))
    else:
        checks.append(ok("opencode plugin", f"{where} sends OpenCode's events to nmem"))
    command = mcp.get("command") if mcp is not None else None
    program = command[0] if isinstance(command, list) and command and isinstance(command[0], str) else None
    key, where = f"mcp.{MCP_NAME}", home_tilde(config_file)
    verdict = mcp_executable("opencode mcp", key, (program or "") if mcp is not None else None, where, fix)
    if verdict.status == "ok" and mcp is not None and mcp.get("enabled") is False:
        verdict = warn("opencode mcp", f"{key} is disabled in {where}", fix)
    return [*checks, verdict]


SETUP: Final = AgentSetup(
    found=HOME.found,
    looked=looked_for(HOME),
    install=_install,
    uninstall=_uninstall,
    checks=(("opencode", lambda settings: check()),),
    project_refusal="--project is for Claude Code: nmem installs OpenCode's plugin in ~/.config/opencode",
)
