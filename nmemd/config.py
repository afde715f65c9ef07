"""Typed settings: defaults, then `~/.config/nmem/config.toml` (or `$NMEM_HOME/config.toml`, the old
place), then `NMEM_*` variables."""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, Final, Literal, NamedTuple, TypeVar

import msgspec

from nmem_client import paths
from nmemd.errors import ConfigError
from nmemd.model import OBSERVATION_TYPES, ObservationType

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
NonNegFloat = Annotated[float, msgspec.Meta(ge=0)]

# Days an observation is kept after it last happened (0: forever); pinned ones are always kept.
# What is cheap to see again (reads, searches, fetches) goes first; what only the past knows
# (prompts, edits, writes, errors) stays. Session rows and their summaries are never swept.
RETENTION_DEFAULTS: dict[ObservationType, float] = {
    "read": 30, "search": 30, "fetch": 30, "notification": 14, "event": 30,
    "command": 90, "tool": 90, "mcp": 90, "agent": 90, "task": 90,
    "session": 365, "compact": 365, "stop": 365, "assistant": 365, "thinking": 90,
    "prompt": 0, "edit": 0, "write": 0, "error": 0,
}  # fmt: skip
assert set(RETENTION_DEFAULTS) == set(OBSERVATION_TYPES), "every type needs a default"


class Settings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Everything the daemon can be told. Paths are resolved by `load`."""

    home: str = ""
    socket: str = ""
    db: str = ""
    # SQLite durability: NORMAL survives process crashes; FULL also power loss.
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    dedup_window_s: NonNegFloat = 600.0
    max_frame_bytes: PositiveInt = 32 * 1024 * 1024
    read_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 5.0
    max_connections: PositiveInt = 1024
    inbox_drain_interval_s: Annotated[float, msgspec.Meta(gt=0)] = 2.0
    idle_timeout_s: NonNegFloat = 0.0  # 0: never exit for idleness
    skip_tools: list[str] = []
    # Under load, extract hook payloads in a child process (nmemd.capture.extract_worker) so that
    # parsing and redaction use the second core; off: the event loop always does (~15 MB less).
    extract_worker: bool = True
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # Recall. SessionStart context size in characters (0: inject nothing); nmemd.recall.context
    # caps it at 9,000 whatever is configured, under Claude Code's 10,000-char limit.
    context_budget: Annotated[int, msgspec.Meta(ge=0)] = 5000
    # Prompt-time recall (off by default: it adds text to every prompt): past observations
    # of other sessions matching the prompt's keywords. min_score is the summed weight of
    # matched keywords (identifier or path 2, plain word 1): 2 = one identifier or two words.
    prompt_recall: bool = False
    prompt_recall_budget: Annotated[int, msgspec.Meta(ge=0, le=9000)] = 1500
    prompt_recall_min_score: NonNegFloat = 2.0
    prompt_recall_max_hits: PositiveInt = 5
    # Maintenance (nmemd.jobs.maintenance): intervals in seconds, 0 turns a job off. Jobs wait for
    # maintenance_idle_s without traffic (at most twice their interval) and run in short steps.
    maintenance_interval_s: NonNegFloat = 600.0  # incremental vacuum and FTS5 merge steps
    maintenance_checkpoint_interval_s: NonNegFloat = 60.0
    maintenance_optimize_interval_s: NonNegFloat = 3600.0  # PRAGMA optimize
    maintenance_integrity_interval_s: NonNegFloat = 86400.0  # quick_check + FTS5 integrity-check
    maintenance_fts_optimize_interval_s: NonNegFloat = 86400.0  # merge the FTS index down to one segment
    maintenance_idle_s: NonNegFloat = 5.0
    # New session files of every agent on this machine (Claude Code's transcripts, Codex's rollouts)
    # imported this often, what `nmem import-transcripts` does: sessions of an agent without hooks, or
    # from before the install, are remembered too. 0 turns it off.
    maintenance_history_interval_s: NonNegFloat = 3600.0
    # Retention (nmemd.jobs.retention): per-type days, merged over RETENTION_DEFAULTS (a file or
    # NMEM_RETENTION_DAYS="read=7,search=7" names only the types it changes).
    retention_days: dict[ObservationType, NonNegFloat] = msgspec.field(default_factory=lambda: dict(RETENTION_DEFAULTS))
    maintenance_retention_interval_s: NonNegFloat = 3600.0
    # Team memory (docs/team.md): teammates' rows are kept locally this many days (0: forever), older
    # ones are answered by the server; a pull runs at least this often (LISTEN/NOTIFY wakes it sooner).
    team_window_days: NonNegFloat = 30.0
    team_pull_interval_s: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    # This machine's name on the team server: written here by the first `nmem team join` (the host
    # name), so every process of the machine (the daemon, whatever its environment) pushes under one.
    team_machine: Annotated[str, msgspec.Meta(max_length=100)] = ""

    @property
    def log_dir(self) -> str:
        return os.path.join(self.home, "logs")

    @property
    def lock(self) -> str:
        return paths.lock_path(self.socket)

    @property
    def store_lock(self) -> str:
        """One daemon per store, whatever socket it was told to serve (issue #16, finding 1)."""
        return os.path.join(self.home, "store.lock")

    @property
    def spool(self) -> str:
        return os.path.join(self.home, "spool")


_FIELDS = {f.name: f for f in msgspec.structs.fields(Settings)}

# Former settings, now constants where they are used (tuning no user needs: the batch size and delay
# of group commit, the step sizes of maintenance, the WAL size that forces a truncate, the rows one team
# push carries). A config file or NMEM_* variable naming one is ignored and said in one line
# (`retired_notes`), never refused.
RETIRED: Final = frozenset({
    "batch_max_events", "batch_max_delay_ms", "maintenance_wal_truncate_bytes", "maintenance_vacuum_pages",
    "maintenance_fts_merge_pages", "maintenance_fts_step_ms", "maintenance_retention_batch", "team_push_batch",
})  # fmt: skip

Number = TypeVar("Number", int, float)


def tunable(name: str, default: Number, minimum: Number) -> Number:
    """A constant of the code that tests and benches change through `NMEM_TUNE_<NAME>` (not a setting:
    not read from config.toml, not shown, may change without notice); a value that cannot be used
    leaves the default."""
    raw = os.environ.get("NMEM_TUNE_" + name, "")
    try:
        value = type(default)(float(raw))
    except (ValueError, OverflowError):
        return default
    return value if value >= minimum else default


def retired_notes(home: str | None = None) -> list[str]:
    """One line for each retired setting that config.toml or an NMEM_* variable still names."""
    path = config_path(home)
    try:
        from_file, text = read_file(path)
    except ConfigError:
        from_file, text = {}, ""  # load_checked says why
    notes = [
        f"{path}{_line_of(text, k)}: {k!r} is no longer a setting (a constant now); ignored"
        for k in from_file
        if k in RETIRED
    ]
    notes += [f"env NMEM_{k.upper()}: {k!r} is no longer a setting (a constant now); ignored"
              for k in sorted(RETIRED) if os.environ.get("NMEM_" + k.upper())]  # fmt: skip
    return notes


def _env_overrides(skip: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _FIELDS:
        if name in skip:
            continue
        raw = os.environ.get("NMEM_" + name.upper())
        if raw is None or raw == "":
            continue
        if name == "skip_tools":
            out[name] = [t.strip() for t in raw.split(",") if t.strip()]
        elif name == "retention_days":
            out[name] = _retention_env(raw)
        else:
            out[name] = raw  # converted and validated by msgspec.convert(strict=False)
    return out


def _retention_env(raw: str) -> dict[str, str]:
    """`read=7, search=14`: the types named, each with its days (converted with the rest)."""
    out: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        kind, sep, days = item.partition("=")
        if not sep or not kind.strip() or not days.strip():
            raise ConfigError(f"env NMEM_RETENTION_DAYS: expected TYPE=DAYS[,TYPE=DAYS...], got {item.strip()!r}")
        out[kind.strip()] = days.strip()
    return out


def _check_retention(value: Any, where: str, at: str = "") -> None:
    if isinstance(value, dict):
        unknown = [k for k in value if k not in OBSERVATION_TYPES]
        if unknown:
            raise _Unusable(
                f"{where}{at}: retention_days: unknown type {unknown[0]!r} (known: {', '.join(OBSERVATION_TYPES)})",
                where,
                "retention_days",
            )


def _merge_retention(layers: list[tuple[str, Any]], path: str = "", text: str = "") -> tuple[Any, str]:
    """Each layer changes only the types it names; a non-table is left for msgspec to refuse."""
    merged: dict[str, Any] = {str(k): v for k, v in RETENTION_DEFAULTS.items()}
    where = ["default"]
    for source, value in layers:
        _check_retention(value, source, _line_of(text, "retention_days") if source == path else "")
        if not isinstance(value, dict):
            return value, source
        merged.update(value)
        where.append(source)
    return merged, " + ".join(where)


CONFIG_MAX_BYTES = 1024 * 1024


class _Unusable(ConfigError):
    """A value that cannot be used, with where it came from and its key (None: the whole source)."""

    def __init__(self, message: str, source: str, key: str | None) -> None:
        super().__init__(message)
        self.source, self.key = source, key


class Checked(NamedTuple):
    settings: Settings
    sources: dict[str, str]
    problems: list[str]  # what was left out, one line each; [] when everything was used


def config_path(home: str | None = None) -> str:
    """The config file: `${XDG_CONFIG_HOME:-~/.config}/nmem/config.toml`, where Linux users look
    (issue #37, 4); else the old place, `$NMEM_HOME/config.toml`, when only that one is there."""
    new = xdg_config_path()
    old = old_config_path(home)
    return old if not os.path.lexists(new) and os.path.lexists(old) else new


def xdg_config_path() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "nmem", "config.toml")


def old_config_path(home: str | None = None) -> str:
    return os.path.join(home or paths.home(), "config.toml")


def config_note(home: str | None = None) -> str:
    """Where the settings were read from, in one line (`nmem config show`, doctor)."""
    path, new = config_path(home), xdg_config_path()
    if path != new:
        return f"read from {path} (the old place: move it to {new}, where it is looked for first)"
    return (
        f"read from {path}"
        if os.path.lexists(path)
        else f"no config file ({new}): every setting from defaults or NMEM_*"
    )


def read_file(path: str) -> tuple[dict[str, Any], str]:
    """The settings in `path` and its text (({}, "") without one); ConfigError naming the file and,
    for a syntax error, the line and column. Read without waiting, a regular file of at most 1 MB:
    a FIFO or `/dev/zero` there hung every command and left one hung nmemd per hook (issue #28, 8)."""
    try:
        raw = paths.read_regular(path, CONFIG_MAX_BYTES, follow=True)
    except (FileNotFoundError, NotADirectoryError):  # no file, or no home yet (status and doctor say why)
        return {}, ""
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
        values = msgspec.toml.decode(raw)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line}: not UTF-8 text") from None
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a table of settings")
    return values, text


def load(overrides: dict[str, Any] | None = None) -> Settings:
    """Build the effective settings; raise ConfigError naming the bad key and where it came from."""
    return load_with_sources(overrides)[0]


def load_with_sources(overrides: dict[str, Any] | None = None) -> tuple[Settings, dict[str, str]]:
    """The effective settings and, for each key, where its value came from."""
    home = paths.home()
    path = config_path(home)
    from_file, text = read_file(path)
    return _build(home, (path, from_file, text), _env_overrides(), dict(overrides or {}))


def load_checked(overrides: dict[str, Any] | None = None) -> Checked:
    """`load_with_sources` that nothing stops: a file that cannot be read is left out whole, a value
    that cannot be used leaves its setting at the default, and each is named in `problems` (the
    daemon logs them and says them at SessionStart; `nmem doctor` fails on them)."""
    home = paths.home()
    path = config_path(home)
    problems: list[str] = []
    try:
        from_file, text = read_file(path)
    except ConfigError as exc:
        problems.append(f"{exc}; the whole file is ignored")
        from_file, text = {}, ""
    try:
        from_env = _env_overrides()
    except ConfigError as exc:
        problems.append(f"{exc}; ignored")
        from_env = _env_overrides(skip={"retention_days"})
    layers = {path: from_file, "command line": dict(overrides or {})}
    for _ in range(len(_FIELDS) * 3):
        try:
            settings, sources = _build(home, (path, from_file, text), from_env, layers["command line"])
            return Checked(settings, sources, problems)
        except _Unusable as exc:
            layer = from_env if exc.source.startswith("env ") else layers.get(exc.source, from_file)
            if exc.key is not None and exc.key in layer:
                del layer[exc.key]
                problems.append(f"{exc}; {exc.key} ignored, its default used")
            else:
                problems.append(f"{exc}; ignored")
                layer.clear()
    defaults = Settings(home=home, socket=paths.socket_path(), db=os.path.join(home, "nmem.db"))
    return Checked(defaults, {}, [*problems, "every setting at its default"])


def did_you_mean(key: str | None) -> str:
    """`; did you mean 'prompt_recall'?` for a misspelt setting; "" when nothing is close."""
    import difflib

    close = difflib.get_close_matches(key or "", [*_FIELDS, *RETIRED], n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def _line_of(text: str, key: str) -> str:
    """` (line N)` where `key` is set in the file's text, to point at it; "" when not found."""
    found = re.search(rf"^[ \t]*(?:\[[ \t]*)?[\"']?{re.escape(key)}[\"']?[ \t]*[=\].]", text, re.M)
    return f" (line {text.count(chr(10), 0, found.start()) + 1})" if found else ""


_AT_KEY = re.compile(r"`\$\.([A-Za-z0-9_]+)")
_UNKNOWN = re.compile(r"unknown field `([^`]+)`")


def _build(
    home: str, file: tuple[str, dict[str, Any], str], from_env: dict[str, Any], overrides: dict[str, Any]
) -> tuple[Settings, dict[str, str]]:
    path, from_file, text = file
    from_file = {k: v for k, v in from_file.items() if k not in RETIRED}  # said by retired_notes
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    retention: list[tuple[str, Any]] = []
    values.update(from_file)
    sources.update(dict.fromkeys(from_file, path))
    if "retention_days" in from_file:
        retention.append((path, from_file["retention_days"]))
    values.update(from_env)
    sources.update({k: f"env NMEM_{k.upper()}" for k in from_env})
    if "retention_days" in from_env:
        retention.append(("env NMEM_RETENTION_DAYS", from_env["retention_days"]))
    values.update(overrides)
    sources.update(dict.fromkeys(overrides, "command line"))
    if "retention_days" in overrides:
        retention.append(("command line", values["retention_days"]))
    if retention:
        values["retention_days"], sources["retention_days"] = _merge_retention(retention, path, text)
    for key, default in (("home", home), ("socket", paths.socket_path())):
        if key not in values:
            values[key], sources[key] = default, "default"
    if "db" not in values:
        values["db"], sources["db"] = os.path.join(values["home"], "nmem.db"), "default"
    try:
        settings = msgspec.convert(values, Settings, strict=False)
    except msgspec.ValidationError as exc:
        message = str(exc)
        match = _AT_KEY.search(message) or _UNKNOWN.search(message)
        bad = match.group(1) if match else None
        where = sources.get(bad, "config") if bad else "config"
        if bad == "retention_days":
            where = retention[-1][0]
        at = _line_of(text, bad) if bad and where == path else ""
        if _UNKNOWN.search(message):
            raise _Unusable(f"{where}{at}: unknown setting {bad!r}{did_you_mean(bad)}", where, bad) from None
        raise _Unusable(f"{where}{at}: {message}", where, bad) from None
    for name in _FIELDS:
        sources.setdefault(name, "default")
    return settings, sources
