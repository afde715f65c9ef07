"""Setup commands: install, uninstall, and the daemon, service and config groups."""

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import msgspec
import typer

from nmemd import config
from nmemd.capture.project import project_root
from nmemd.cli import ui
from nmemd.cli.common import JsonOpt, cell, confirmed, fail, load_settings, out, print_table
from nmemd.daemon import control
from nmemd.errors import NmemError

if TYPE_CHECKING:  # nmemd.setup.install loads when a command runs
    from nmemd.setup.install import HooksAndMcp, Written

daemon_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Start, stop or restart the nmemd daemon.")
service_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Run nmemd under systemd (Linux) or launchd (macOS), socket-activated.",
)
config_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Inspect nmem's configuration.")


def _settings_target(project_scope: bool) -> Path:
    from nmemd.setup import install as inst

    if not project_scope:
        return inst.user_settings_path()
    root = project_root(os.getcwd()) or os.getcwd()
    return inst.project_settings_path(root)


ProjectScopeOpt = Annotated[
    bool, typer.Option("--project", help="Use this project's .claude/settings.json instead of the user's.")
]
NoMcpOpt = Annotated[bool, typer.Option("--no-mcp", help="Leave the MCP server registration alone.")]
AgentOpt = Annotated[
    str,
    typer.Option(
        "--agent",
        help="The coding agent: claude-code (claude), codex, gemini, copilot, cursor, cline, opencode, or all"
        " (those on this machine).",
    ),
]


def _agents(agent: str, project_scope: bool) -> list[str]:
    """The agents an install or uninstall is for; a clear error for an unknown one."""
    from nmemd.model import AGENT_ALIASES, AGENTS
    from nmemd.setup import cline, codex, copilot, cursor, gemini, opencode

    name = AGENT_ALIASES.get(agent.strip(), agent.strip())
    present = {codex.AGENT: codex.found, gemini.AGENT: gemini.found, copilot.AGENT: copilot.found,
               cursor.AGENT: cursor.found, cline.AGENT: cline.found, opencode.AGENT: opencode.found}  # fmt: skip
    if name == "all":
        found = [a for a in AGENTS if present.get(a, _claude_found)()]
        if not found:
            fail("no coding agent found on this machine (Claude Code: ~/.claude; Codex: $CODEX_HOME or ~/.codex;"
                 " Gemini CLI: ~/.gemini; Copilot CLI: $COPILOT_HOME or ~/.copilot;"
                 " OpenCode: ~/.config/opencode)")  # fmt: skip
        chosen = found
    elif name in AGENTS:
        chosen = [name]
    else:
        fail(f"unknown agent {agent!r} (known: {', '.join(AGENTS)}, all)", 2)
    if project_scope and (codex.AGENT in chosen or gemini.AGENT in chosen):
        if name == codex.AGENT:
            fail("--project is for Claude Code: Codex reads its hooks from $CODEX_HOME (default ~/.codex)", 2)
        if name == gemini.AGENT:
            fail("--project is for Claude Code: nmem installs into the Gemini CLI's user settings (~/.gemini)", 2)
        chosen = [a for a in chosen if a not in (codex.AGENT, gemini.AGENT)]
    if project_scope and copilot.AGENT in chosen:
        if name != "all":
            fail("--project is for Claude Code: nmem installs Copilot's hooks in $COPILOT_HOME (default ~/.copilot)", 2)
        chosen = [a for a in chosen if a != copilot.AGENT]
    if project_scope and (cursor.AGENT in chosen or cline.AGENT in chosen):
        if name in (cursor.AGENT, cline.AGENT):
            fail(f"--project is for Claude Code: nmem installs {name}'s hooks in your home folder", 2)
        chosen = [a for a in chosen if a not in (cursor.AGENT, cline.AGENT)]
    if project_scope and opencode.AGENT in chosen:
        if name != "all":
            fail("--project is for Claude Code: nmem installs OpenCode's plugin in ~/.config/opencode", 2)
        chosen = [a for a in chosen if a != opencode.AGENT]
    return chosen


def _found_where(name: str) -> tuple[str, bool]:
    """An agent's label, and whether it is on this machine (its folder, or its command on PATH)."""
    from nmemd.setup import cline, codex, copilot, cursor, gemini, opencode

    found = {codex.AGENT: ("Codex", codex.found), gemini.AGENT: ("Gemini CLI", gemini.found),
             copilot.AGENT: ("Copilot CLI", copilot.found), cursor.AGENT: ("Cursor", cursor.found),
             cline.AGENT: ("Cline", cline.found), opencode.AGENT: ("OpenCode", opencode.found)}  # fmt: skip
    label, present = found.get(name, ("Claude Code", _claude_found))
    return label, present()


def _not_installed(name: str) -> str:
    """Where nmem looked for an agent it did not find."""
    from nmemd.capture.copilot import copilot_home
    from nmemd.capture.opencode import config_dir
    from nmemd.setup import cline, codex, copilot, cursor, gemini, opencode
    from nmemd.setup import install as inst
    from nmemd.setup.checks import home_tilde

    folder, command = {
        codex.AGENT: (codex.codex_home(), "codex"), gemini.AGENT: (gemini.gemini_dir(), "gemini"),
        copilot.AGENT: (copilot_home(), "copilot"), cursor.AGENT: (cursor.cursor_dir(), "cursor"),
        cline.AGENT: (cline.hooks_dir().parent, "cline"), opencode.AGENT: (Path(config_dir()), "opencode"),
    }.get(name, (inst.claude_dir(), "claude"))  # fmt: skip
    return f"no {home_tilde(folder)}, no {command} on PATH"


def _claude_found() -> bool:
    import shutil

    from nmemd.setup import install as inst

    return inst.claude_dir().is_dir() or shutil.which("claude") is not None


def _outcome(w: "Written") -> str:
    if not w.changed:
        return "already up to date"
    return f"updated, backup {w.backup.name}" if w.backup else "created"


def install(
    project_scope: ProjectScopeOpt = False,
    print_only: Annotated[bool, typer.Option("--print", help="Show what would be written; change nothing.")] = False,
    no_mcp: NoMcpOpt = False,
    import_history: Annotated[
        bool | None,
        typer.Option(
            "--import/--no-import",
            help="Import existing Claude Code history now (default: ask once, on a terminal only).",
        ),
    ] = None,
    agent: AgentOpt = "claude-code",
) -> None:
    """Add nmem's hooks to a coding agent's settings and register the nmem MCP server (idempotent).

    An agent not on this machine is skipped, with a word: nmem creates no folder of an agent's."""
    agents = _agents(agent, project_scope)
    if not print_only and not project_scope:
        for name in [a for a in agents if not _found_where(a)[1]]:
            label = _found_where(name)[0]
            out().print(f"skipped {label}: not installed here ({_not_installed(name)}); install it, then run"
                        f" this again", highlight=False)  # fmt: skip
            agents.remove(name)
        if not agents:
            fail("nothing installed: no coding agent named is on this machine (nmem install --agent all finds them)")
    steps: dict[str, Callable[[], None]] = {
        "codex": lambda: _install_codex(print_only, no_mcp),
        "gemini": lambda: _install_gemini(print_only, no_mcp),
        "copilot": lambda: _install_copilot(print_only, no_mcp),
        "cursor": lambda: _install_cursor(print_only, no_mcp),
        "cline": lambda: _install_cline(print_only, no_mcp),
        "opencode": lambda: _install_opencode(print_only, no_mcp),
        "claude-code": lambda: _install_claude(project_scope, print_only, no_mcp, import_history),
    }
    failed = _each_agent(agents, steps)
    if not print_only and len(failed) < len(agents):
        labels = " or ".join(_found_where(a)[0] for a in agents if a not in failed)
        out().print(f"next: start a new {labels} session in a project; it begins with what nmem remembers of the"
                    " last ones.\n      nmem doctor checks the install; nmem search WORDS or nmem ui shows what is"
                    " remembered.", highlight=False)  # fmt: skip
    _failed(failed, agents, "install")


def _each_agent(agents: list[str], steps: dict[str, Callable[[], None]]) -> list[str]:
    """Run every agent's step, in this order, even after one failed (each says why on its own line);
    the agents that failed (issue #28, finding 10: `--agent all` stopped at the first broken file)."""
    failed = []
    for name, step in steps.items():
        if name in agents:
            try:
                step()
            except typer.Exit as exc:
                if exc.exit_code:
                    failed.append(name)
    return failed


def _failed(failed: list[str], agents: list[str], what: str) -> None:
    if failed and len(agents) > 1:
        fail(f"{what} failed for {', '.join(failed)}; the other agents are done")
    if failed:
        raise typer.Exit(1)


def _install_codex(print_only: bool, no_mcp: bool) -> None:
    from nmemd.setup import codex

    try:
        plan = codex.plan_install(mcp=not no_mcp)
        if print_only:
            sys.stdout.write(codex.printed(plan))
            return
        hooks_written, config_written = codex.apply(plan)
    except NmemError as exc:
        fail(str(exc))
    console = out()
    console.print(f"Codex hooks: {plan.hooks} ({_outcome(hooks_written)})", highlight=False)
    what = "trust of nmem's hooks" + ("" if no_mcp else f" and MCP server '{codex.MCP_NAME}'")
    console.print(f"Codex {what}: {plan.config} ({_outcome(config_written)})", highlight=False)
    from nmemd.history.importer import codex_root

    if os.path.isdir(codex_root()):
        console.print("import your existing Codex history with: nmem import-transcripts", highlight=False)


def _install_gemini(print_only: bool, no_mcp: bool) -> None:
    from nmemd.setup import gemini

    try:
        plan = gemini.plan_install(mcp=not no_mcp)
        if print_only:
            sys.stdout.write(gemini.printed(plan))
            return
        written = gemini.apply(plan)
    except NmemError as exc:
        fail(str(exc))
    what = "hooks" + ("" if no_mcp else f" and MCP server '{gemini.MCP_NAME}'")
    out().print(f"Gemini CLI {what}: {plan.path} ({_outcome(written)})", highlight=False)
    from nmemd.history.importer import gemini_root

    if os.path.isdir(gemini_root()):
        out().print("import your existing Gemini CLI history with: nmem import-transcripts", highlight=False)


def _install_copilot(print_only: bool, no_mcp: bool) -> None:
    from nmemd.capture.copilot import session_state
    from nmemd.setup import copilot

    _install_hooks_and_mcp("Copilot", copilot.plan_install, print_only, no_mcp)
    if not print_only and session_state().is_dir():
        out().print("import your existing Copilot history with: nmem import-transcripts", highlight=False)


def _install_cursor(print_only: bool, no_mcp: bool) -> None:
    from nmemd.setup import cursor

    _install_hooks_and_mcp("Cursor", cursor.plan_install, print_only, no_mcp)


def _install_hooks_and_mcp(
    label: str, plan_install: "Callable[..., HooksAndMcp]", print_only: bool, no_mcp: bool
) -> None:
    """An agent whose hooks and MCP servers are two JSON files of its own (`install.HooksAndMcp`)."""
    from nmemd.setup.install import MCP_NAME

    try:
        plan = plan_install(mcp=not no_mcp)
        if print_only:
            sys.stdout.write(plan.printed())
            return
        hooks_written, mcp_written = plan.apply()
    except NmemError as exc:
        fail(str(exc))
    console = out()
    console.print(f"{label} hooks: {plan.hooks} ({_outcome(hooks_written)})", highlight=False)
    if plan.mcp_data is not None:
        console.print(f"{label} MCP server '{MCP_NAME}': {plan.mcp} ({_outcome(mcp_written)})", highlight=False)


def _install_cline(print_only: bool, no_mcp: bool) -> None:
    from nmemd.setup import cline
    from nmemd.setup import install as inst

    if print_only:
        sys.stdout.write(cline.printed())
        return
    try:
        result = cline.install_scripts()
    except NmemError as exc:
        fail(str(exc))
    console = out()
    if result.written:
        console.print(f"Cline hooks: {', '.join(result.written)} written in {result.folder}", highlight=False)
    if result.current:
        console.print(f"Cline hooks: {', '.join(result.current)} already up to date", highlight=False)
    for name in result.foreign:
        console.print(f"Cline hook {result.folder / name} is not nmem's: left alone, so nmem does not see {name}",
                      highlight=False)  # fmt: skip
    if not no_mcp:
        console.print(cline.MCP_HINT.format(command=inst.mcp_command()), highlight=False)


def _install_opencode(print_only: bool, no_mcp: bool) -> None:
    from nmemd.setup import opencode

    try:
        plan = opencode.plan_install(mcp=not no_mcp)
        if print_only:
            sys.stdout.write(opencode.printed(plan))
            return
        plugin_written, config_written = opencode.apply(plan)
    except NmemError as exc:
        fail(str(exc))
    console = out()
    console.print(f"OpenCode plugin: {plan.plugin_path} ({_outcome(plugin_written)})", highlight=False)
    if config_written is not None:
        console.print(f"OpenCode MCP server '{opencode.MCP_NAME}': {plan.config_path} ({_outcome(config_written)})",
                      highlight=False)  # fmt: skip
    from nmemd.capture.opencode import database

    if os.path.isfile(database()):
        console.print("import your existing OpenCode history with: nmem import-transcripts", highlight=False)


def _prompt_recall() -> bool:
    """Whether prompt recall is on (config.toml, NMEM_PROMPT_RECALL): its UserPromptSubmit hook must then
    be waited for. A config that cannot be read counts as on: a hook waited for costs ~15 ms, one not
    waited for loses the recalled text."""
    try:
        return config.load().prompt_recall
    except NmemError:
        return True


def _install_claude(project_scope: bool, print_only: bool, no_mcp: bool, import_history: bool | None) -> None:
    from nmemd.setup import install as inst

    target = _settings_target(project_scope)
    try:
        specs = inst.hook_specs(_prompt_recall())
        settings = inst.with_hooks(inst.load(target), target, inst.hook_command(), specs)
        state_path = inst.user_state_path()
        state = None if no_mcp else inst.with_mcp(inst.load(state_path), state_path, sys.executable, inst.mcp_args())
        if print_only:
            sys.stdout.write(f"# {target}\n{inst.render(settings)}")
            if state is not None:
                sys.stdout.write(f"# {state_path}: mcpServers.{inst.MCP_NAME}\n")
                sys.stdout.write(inst.render({"mcpServers": {inst.MCP_NAME: state["mcpServers"][inst.MCP_NAME]}}))
            return
        hooks_written = inst.write(target, settings)
        mcp_written = inst.write(state_path, state) if state is not None else None
    except NmemError as exc:
        fail(str(exc))

    console = out()
    console.print(f"hooks: {target} ({_outcome(hooks_written)})", highlight=False)
    if mcp_written is not None:
        console.print(f"MCP server '{inst.MCP_NAME}': {state_path} ({_outcome(mcp_written)})", highlight=False)
    from nmemd.cli.backfill import offer_import

    offer_import(import_history)


def uninstall(
    project_scope: ProjectScopeOpt = False,
    no_mcp: NoMcpOpt = False,
    agent: AgentOpt = "claude-code",
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Remove exactly the hooks and MCP registration that `nmem install` added.

    On a terminal it asks first (--yes does not ask)."""
    agents = _agents(agent, project_scope)
    labels = ", ".join(_found_where(a)[0] for a in agents)
    what = "hooks" if no_mcp else "hooks and MCP server"
    confirmed(f"Remove nmem's {what} from {labels}? (your memory stays)", yes or not sys.stdin.isatty(), "uninstall")
    steps: dict[str, Callable[[], None]] = {
        "codex": lambda: _uninstall_codex(no_mcp),
        "gemini": lambda: _uninstall_gemini(no_mcp),
        "copilot": lambda: _uninstall_copilot(no_mcp),
        "cursor": lambda: _uninstall_cursor(no_mcp),
        "cline": _uninstall_cline,
        "opencode": lambda: _uninstall_opencode(no_mcp),
        "claude-code": lambda: _uninstall_claude(project_scope, no_mcp),
    }
    failed = _each_agent(agents, steps)
    if len(failed) < len(agents):
        settings = load_settings()
        out().print(
            f"your memory stays in {settings.db}; delete it with: nmem daemon stop && rm -r {settings.home}",
            highlight=False,
        )
    _failed(failed, agents, "uninstall")


def _uninstall_codex(no_mcp: bool) -> None:
    from nmemd.setup import codex

    try:
        plan = codex.plan_uninstall(mcp=not no_mcp)
        hooks_written, config_written = codex.apply(plan)
    except NmemError as exc:
        fail(str(exc))
    console = out()
    if hooks_written.changed:
        console.print(f"Codex hooks removed from {plan.hooks}", highlight=False)
    else:
        console.print(f"no nmem hooks in {plan.hooks}", highlight=False)
    if config_written.changed:
        what = "trust of nmem's hooks" + ("" if no_mcp else f" and MCP server '{codex.MCP_NAME}'")
        console.print(f"Codex {what} removed from {plan.config}", highlight=False)


def _uninstall_gemini(no_mcp: bool) -> None:
    from nmemd.setup import gemini

    try:
        plan = gemini.plan_uninstall(mcp=not no_mcp)
        written = gemini.apply(plan)
    except NmemError as exc:
        fail(str(exc))
    if written.changed:
        what = "hooks" + ("" if no_mcp else f" and MCP server '{gemini.MCP_NAME}'")
        out().print(f"Gemini CLI {what} removed from {plan.path}", highlight=False)
    else:
        out().print(f"no nmem hooks in {plan.path}", highlight=False)


def _uninstall_copilot(no_mcp: bool) -> None:
    from nmemd.setup import copilot

    _uninstall_hooks_and_mcp("Copilot", copilot.plan_uninstall, no_mcp)


def _uninstall_cursor(no_mcp: bool) -> None:
    from nmemd.setup import cursor

    _uninstall_hooks_and_mcp("Cursor", cursor.plan_uninstall, no_mcp)


def _uninstall_hooks_and_mcp(label: str, plan_uninstall: "Callable[..., HooksAndMcp]", no_mcp: bool) -> None:
    from nmemd.setup.install import MCP_NAME

    try:
        plan = plan_uninstall(mcp=not no_mcp)
        hooks_written, mcp_written = plan.apply(uninstall=True)
    except NmemError as exc:
        fail(str(exc))
    console = out()
    if hooks_written.changed:
        console.print(f"{label} hooks removed from {plan.hooks}", highlight=False)
    else:
        console.print(f"no nmem hooks in {plan.hooks}", highlight=False)
    if mcp_written.changed:
        console.print(f"{label} MCP server '{MCP_NAME}' removed from {plan.mcp}", highlight=False)


def _uninstall_cline() -> None:
    from nmemd.setup import cline

    try:
        result = cline.uninstall_scripts()
    except NmemError as exc:
        fail(str(exc))
    if result.removed:
        out().print(f"Cline hooks {', '.join(result.removed)} removed from {result.folder}", highlight=False)
    else:
        out().print(f"no nmem hooks in {result.folder}", highlight=False)


def _uninstall_opencode(no_mcp: bool) -> None:
    from nmemd.setup import opencode

    try:
        plan = opencode.plan_uninstall(mcp=not no_mcp)
        plugin_written, config_written = opencode.apply(plan)
    except NmemError as exc:
        fail(str(exc))
    console = out()
    if plugin_written.changed:
        console.print(f"OpenCode plugin removed: {plan.plugin_path}", highlight=False)
    else:
        console.print(f"no nmem plugin at {plan.plugin_path}", highlight=False)
    if config_written is not None and config_written.changed:
        console.print(f"OpenCode MCP server '{opencode.MCP_NAME}' removed from {plan.config_path}", highlight=False)


def _uninstall_claude(project_scope: bool, no_mcp: bool) -> None:
    from nmemd.setup import install as inst

    target = _settings_target(project_scope)
    # A project installed by an earlier version has its hooks in .claude/settings.json: clean both.
    targets = [target, target.with_name("settings.json")] if project_scope else [target]
    mcp_removed = False
    try:
        removed = [t for t in targets if t.exists() and inst.uninstall_hooks(t).changed]
        state_path = inst.user_state_path()
        if not no_mcp and state_path.exists():
            mcp_removed = inst.uninstall_mcp(state_path).changed
    except NmemError as exc:
        fail(str(exc))
    console = out()
    for t in removed:
        console.print(f"hooks removed from {t}", highlight=False)
    if not removed:
        console.print(f"no nmem hooks in {target}", highlight=False)
    if mcp_removed:
        console.print(f"MCP server '{inst.MCP_NAME}' removed from {state_path}", highlight=False)


@config_app.command("show")
def config_show(json_out: JsonOpt = False) -> None:
    """Print the effective configuration and where each value came from."""
    settings, sources, problems = config.load_checked()
    for problem in problems:  # what is shown is what the daemon runs on: the rest at its default
        ui.Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {ui.escape(problem)}", highlight=False)
    for note in config.retired_notes(settings.home):  # ignored: a warning, not a failure
        ui.Console(stderr=True, soft_wrap=True).print(f"[yellow]warning:[/yellow] {ui.escape(note)}", highlight=False)
    values = msgspec.to_builtins(settings)
    if json_out:
        rows = {k: {"value": v, "source": sources.get(k, "default")} for k, v in values.items()}
        sys.stdout.write(msgspec.json.encode(rows).decode() + "\n")
        raise typer.Exit(1 if problems else 0)
    table = ui.Table(box=None, pad_edge=False, header_style="bold")
    for column in ("setting", "value", "source"):
        table.add_column(column)
    for key, value in values.items():
        table.add_row(key, cell(str(value)), sources.get(key, "default"))
    print_table(table)
    if problems:
        raise typer.Exit(1)


@daemon_app.command("start")
def daemon_start() -> None:
    """Start nmemd in the background (no-op when it already runs)."""
    settings = load_settings(lenient=True)
    try:
        facts = control.start(settings)
    except NmemError as exc:
        fail(str(exc))
    out().print(f"nmemd running (pid {facts.pid}) on {facts.socket}", highlight=False)


@daemon_app.command("stop")
def daemon_stop() -> None:
    """Stop nmemd after it commits everything it received."""
    settings = load_settings(lenient=True)
    try:
        pid = control.stop(settings)
    except NmemError as exc:
        fail(str(exc))
    out().print("nmemd was not running" if pid is None else f"nmemd (pid {pid}) stopped", highlight=False)


@daemon_app.command("restart")
def daemon_restart() -> None:
    """Stop nmemd, then start it again."""
    settings = load_settings(lenient=True)
    try:
        control.stop(settings)
        facts = control.start(settings)
    except NmemError as exc:
        fail(str(exc))
    out().print(f"nmemd restarted (pid {facts.pid})", highlight=False)


@service_app.command("install")
def service_install() -> None:
    """Install and enable the user service so the OS starts nmemd on the first connection."""
    from nmemd.setup import service

    try:
        done = service.install()
    except NmemError as exc:
        fail(str(exc))
    console = out()
    if done.stopped_pid is not None:
        console.print(f"stopped the hand-started nmemd (pid {done.stopped_pid})", highlight=False)
    for path in done.files:
        console.print(f"wrote {path}", highlight=False)
    console.print(f"{done.manager} listens on {done.socket} and starts {done.nmemd} on demand", highlight=False)


@service_app.command("uninstall")
def service_uninstall() -> None:
    """Stop and disable the user service and remove the files `nmem service install` wrote."""
    from nmemd.setup import service

    try:
        done = service.uninstall()
    except NmemError as exc:
        fail(str(exc))
    console = out()
    for path in done.removed:
        console.print(f"removed {path}", highlight=False)
    console.print(f"{done.manager}: nmem service uninstalled", highlight=False)


@service_app.command("status")
def service_status(json_out: JsonOpt = False) -> None:
    """Show whether the user service is installed, enabled, listening and running."""
    from nmemd.setup import service

    try:
        st = service.status()
    except NmemError as exc:
        fail(str(exc))
    if json_out:
        sys.stdout.write(msgspec.json.encode(st).decode() + "\n")
        return
    table = ui.Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("manager", st.manager)
    table.add_row("installed", ", ".join(st.files) if st.installed else "no")
    table.add_row("enabled", st.enabled)
    table.add_row("socket", f"{st.socket} ({st.socket_state})")
    table.add_row("daemon", st.daemon_state)
    print_table(table)
