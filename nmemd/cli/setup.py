"""`nmem install` and `nmem uninstall`: for each agent chosen, its setup from the registry (`AgentSpec.setup`)."""

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from nmemd.cli.common import confirmed, fail, load_settings, out
from nmemd.errors import NmemError
from nmemd.model import CLAUDE_CODE
from nmemd.registry import AGENTS, AgentSpec

if TYPE_CHECKING:  # nmemd.setup loads when a command runs
    from nmemd.setup.agent_setup import AgentSetup


ProjectScopeOpt = Annotated[
    bool,
    typer.Option(
        "--project",
        help="Use this project's .claude/settings.local.json (the file a team does not commit: it names this"
        " machine's paths) instead of the user's settings.",
    ),
]
NoMcpOpt = Annotated[bool, typer.Option("--no-mcp", help="Leave the MCP server registration alone.")]
_AGENT_NAMES = ", ".join(f"{s.name} ({', '.join(s.aliases)})" if s.aliases else s.name for s in AGENTS.values())
AgentOpt = Annotated[
    str, typer.Option("--agent", help=f"The coding agent: {_AGENT_NAMES}, or all (those on this machine).")
]


def _agents(agent: str, project_scope: bool) -> list[AgentSpec]:
    """The agents an install or uninstall is for; a clear error for an unknown one."""
    from nmemd import registry

    name = registry.canonical(agent.strip())
    if name == "all":
        installable = [spec for spec in registry.AGENTS.values() if spec.setup is not None]
        chosen = [spec for spec in installable if _setup(spec).found()]
        if not chosen:
            looked = "; ".join(f"{spec.label}: {_setup(spec).looked()}" for spec in installable)
            fail(f"no coding agent found on this machine ({looked})")
    elif (spec := registry.get(name)) is not None and spec.setup is not None:
        chosen = [spec]
    else:
        known = [s.name for s in registry.AGENTS.values() if s.setup is not None]
        fail(f"unknown agent {agent!r} (known: {', '.join(known)}, all)", 2)
    if project_scope:
        for spec in chosen:
            refusal = spec.setup().project_refusal if spec.setup is not None else None
            if refusal is not None and name == spec.name:
                fail(refusal, 2)
        chosen = [spec for spec in chosen if spec.setup is not None and spec.setup().project_refusal is None]
    return chosen


def _setup(spec: AgentSpec) -> "AgentSetup":
    assert spec.setup is not None  # _agents chose only agents with one
    return spec.setup()


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
    agent: AgentOpt = CLAUDE_CODE,
) -> None:
    """Add nmem's hooks to a coding agent's settings and register the nmem MCP server (idempotent).

    An agent not on this machine is skipped, with a word: nmem creates no folder of an agent's."""
    from nmemd.setup.agent_setup import InstallOptions

    agents = _agents(agent, project_scope)
    if not print_only and not project_scope:
        for spec in [a for a in agents if not _setup(a).found()]:
            out().print(f"skipped {spec.label}: not installed here ({_setup(spec).looked()}); install it, then run"
                        f" this again", highlight=False)  # fmt: skip
            agents.remove(spec)
        if not agents:
            fail("nothing installed: no coding agent named is on this machine (nmem install --agent all finds them)")
    options = InstallOptions(print_only=print_only, mcp=not no_mcp, project_scope=project_scope)
    offer = False

    def step(spec: AgentSpec) -> None:
        nonlocal offer
        try:
            done = _setup(spec).install(options)
        except NmemError as exc:
            fail(str(exc))
        if done.printed is not None:
            sys.stdout.write(done.printed)
        for line in done.lines:
            out().print(line, highlight=False)
        offer = offer or done.offer_import

    failed = _each_agent(agents, step)
    _backups_said()
    if offer:
        from nmemd.cli.import_transcripts import offer_import

        offer_import(import_history)
    if not print_only and len(failed) < len(agents):
        labels = " or ".join(a.label for a in agents if a not in failed)
        out().print(f"next: start a new {labels} session in a project; it begins with what nmem remembers of the"
                    " last ones.\n      nmem doctor checks the install; nmem search WORDS or nmem ui shows what is"
                    " remembered.", highlight=False)  # fmt: skip
    _failed(failed, agents, "install")


def _each_agent(agents: list[AgentSpec], step: Callable[[AgentSpec], None]) -> list[AgentSpec]:
    """Run every agent's step, in the registry's order, even after one failed (each says why on its own
    line); the agents that failed (issue #28, finding 10: `--agent all` stopped at the first broken file)."""
    failed = []
    for spec in agents:
        try:
            step(spec)
        except typer.Exit as exc:
            if exc.exit_code:
                failed.append(spec)
    return failed


def _failed(failed: list[AgentSpec], agents: list[AgentSpec], what: str) -> None:
    if failed and len(agents) > 1:
        fail(f"{what} failed for {', '.join(a.name for a in failed)}; the other agents are done")
    if failed:
        raise typer.Exit(1)


def uninstall(
    project_scope: ProjectScopeOpt = False,
    no_mcp: NoMcpOpt = False,
    agent: AgentOpt = CLAUDE_CODE,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    stop: Annotated[
        bool, typer.Option("--stop", help="Also stop the daemon (and remove its service, if installed).")
    ] = False,
    leave_teams: Annotated[
        bool, typer.Option("--leave-teams", help="Also stop sharing every project with its team.")
    ] = False,
) -> None:
    """Remove exactly the hooks and MCP registration that `nmem install` added.

    On a terminal it asks first (--yes does not ask). Then it says what it leaves in place (the daemon,
    its service, team shares, your memory, the program) and, on a terminal, offers to stop the daemon and
    the sharing (--stop, --leave-teams: without asking)."""
    from nmemd.setup.agent_setup import InstallOptions

    agents = _agents(agent, project_scope)
    labels = ", ".join(a.label for a in agents)
    what = "hooks" if no_mcp else "hooks and MCP server"
    confirmed(f"Remove nmem's {what} from {labels}? (your memory stays)", yes or not sys.stdin.isatty(), "uninstall")
    options = InstallOptions(mcp=not no_mcp, project_scope=project_scope)

    def step(spec: AgentSpec) -> None:
        try:
            lines = _setup(spec).uninstall(options)
        except NmemError as exc:
            fail(str(exc))
        for line in lines:
            out().print(line, highlight=False)

    failed = _each_agent(agents, step)
    _backups_said()
    if len(failed) < len(agents):
        _leftovers(stop, leave_teams, ask=not yes and sys.stdin.isatty())
    _failed(failed, agents, "uninstall")


def _backups_said() -> None:
    """Where the copies of the files changed went (0600, beside each; an older copy of the same bytes goes)."""
    from nmemd.setup import files

    if files.made:
        made = ", ".join(map(str, files.made))
        out().print(f"backups (0600, beside each file; an older identical one removed): {made}", highlight=False)


def _leftovers(stop: bool, leave_teams: bool, *, ask: bool) -> None:
    """Say what uninstall leaves in place; stop the daemon and the sharing when told, or when a person
    says so (issue #37, 2)."""
    from nmemd.setup import leftovers

    settings = load_settings(lenient=True)
    left = leftovers.find(settings)
    for line in leftovers.lines(settings, left):
        out().print(line, highlight=False)
    if left.shared_roots and (leave_teams or (ask and typer.confirm("Stop sharing those projects now?"))):
        from nmemd.control import control

        for root in left.shared_roots:
            try:
                if left.daemon_pid is None:
                    control.start(settings)  # the daemon holds the store's writer: it takes the share out
                control.ask("team_leave", {"root": root})
                out().print(f"{root} is no longer shared", highlight=False)
            except NmemError as exc:
                out().print(f"{root}: still shared ({exc})", highlight=False)
    if (left.daemon_pid is not None or left.service_files) and (
        stop or (ask and typer.confirm("Stop the daemon now?"))
    ):
        from nmemd.control import control

        try:
            if left.service_files:
                from nmemd.setup import service

                service.uninstall()
                out().print("service removed", highlight=False)
            pid = control.stop(settings)
            out().print(f"nmemd (pid {pid}) stopped" if pid else "no daemon was running", highlight=False)
        except NmemError as exc:
            out().print(f"the daemon: {exc}", highlight=False)
