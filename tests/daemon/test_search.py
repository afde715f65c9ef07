"""Acceptance for search: tests/data hook payloads + synthetic events through nmem-send into a daemon, then queries.

The corpus is built once per module (one daemon, ~60 events through the real hook
client); each query is checked through `queries.search` on a read-only connection,
and a few through the `nmem` CLI with and without a daemon running.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.daemon import Daemon, run_send
from support.fixtures import hook_payloads
from support.helpers import claude_bash, claude_edit, claude_event, claude_tool, nmem_bytes, send_frame

from nmem_client import protocol
from nmemd.errors import QueryError
from nmemd.recall import queries, search
from nmemd.recall.queries import Filters
from nmemd.store import fts, readers

CLI_TIMEOUT_S = 20.0
pytestmark = pytest.mark.xdist_group("search_corpus")  # one worker starts `corpus` once


# --- synthetic events: real hook payload shapes -----------------------------------------------


def session_start(session: str, cwd: str) -> dict[str, Any]:
    return claude_event("SessionStart", session, cwd, source="startup", model="claude-opus-4-6")


def prompt(session: str, cwd: str, text: str) -> dict[str, Any]:
    return claude_event("UserPromptSubmit", session, cwd, prompt=text)


def write(session: str, cwd: str, rel: str, content: str) -> dict[str, Any]:
    path = f"{cwd}/{rel}"
    return claude_tool(
        session,
        cwd,
        "Write",
        {"file_path": path, "content": content},
        {"type": "create", "filePath": path, "content": content},
    )


def read(session: str, cwd: str, rel: str, lines: int) -> dict[str, Any]:
    path = f"{cwd}/{rel}"
    return claude_tool(
        session,
        cwd,
        "Read",
        {"file_path": path},
        {
            "type": "text",
            "file": {
                "filePath": path,
                "content": "x\n" * lines,
                "numLines": lines,
                "startLine": 1,
                "totalLines": lines,
            },
        },
    )


def grep(session: str, cwd: str, pattern: str, files: list[str]) -> dict[str, Any]:
    return claude_tool(
        session,
        cwd,
        "Grep",
        {"pattern": pattern, "path": f"{cwd}/src"},
        {"mode": "files_with_matches", "filenames": [f"{cwd}/{f}" for f in files], "numFiles": len(files)},
    )


def failure(session: str, cwd: str, command: str, error: str) -> dict[str, Any]:
    return claude_event(
        "PostToolUseFailure",
        session,
        cwd,
        tool_name="Bash",
        tool_input={"command": command, "description": ""},
        error=error,
        tool_use_id=f"toolu_{os.urandom(8).hex()}",
    )


def synthetic(web: str, cli: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, payload) in send order; every payload becomes exactly one observation."""
    w1, w2, c1, c2 = "sess-web-1", "sess-web-2", "sess-cli-1", "sess-cli-2"
    return [
        ("w1.start", session_start(w1, web)),
        ("w1.prompt", prompt(w1, web, "Fix the login redirect loop after the OAuth callback")),
        (
            "w1.edit_auth",
            claude_edit(
                w1,
                web,
                "src/auth.ts",
                "export function save_hook(cb) {\n  hooks.push(cb)\n}",
                "export function saveHook(cb: Hook) {\n  hooks.push(cb)\n}",
            ),
        ),
        (
            "w1.edit_login",
            claude_edit(
                w1,
                web,
                "src/components/LoginForm.tsx",
                "const [user, setUser] = React.useState(null)",
                "const [user, setUser] = useState<User | null>(null)",
            ),
        ),
        (
            "w1.test_ok",
            claude_bash(w1, web, "npm test -- --grep 'redirect loop'", "14 passing (2s)", "Run redirect tests"),
        ),
        (
            "w1.pytest_fail",
            failure(
                w1,
                web,
                "python -m pytest tests/test_payments.py",
                "Exit code 1\nE   ModuleNotFoundError: No module named 'stripe_connector'",
            ),
        ),
        ("w1.read_auth", read(w1, web, "src/auth.ts", 40)),
        (
            "w1.write_doc",
            write(
                w1,
                web,
                "docs/authentication.md",
                "# Authentication\n\nSessions are signed with HMAC and rotated daily.\n",
            ),
        ),
        ("w1.grep", grep(w1, web, "useEffect", ["src/components/LoginForm.tsx", "src/App.tsx"])),
        ("w2.prompt", prompt(w2, web, "refactor the billing module to use decimal amounts instead of floats")),
        (
            "w2.edit_invoice",
            claude_edit(w2, web, "src/billing/invoice.py", "total = float(amount)", "total = Decimal(amount)"),
        ),
        (
            "w2.build_fail",
            failure(
                w2,
                web,
                "npm run build",
                "TypeError: Cannot read properties of undefined (reading 'map')\n"
                "    at renderList (src/components/List.tsx:12:18)",
            ),
        ),
        ("w2.docker", claude_bash(w2, web, "docker compose up -d postgres", "Container webapp-postgres-1  Started")),
        ("w2.reread_auth", read(w2, web, "src/auth.ts", 40)),  # newer than the edit: recency vs type
        ("w2.supabase_prompt", prompt(w2, web, "the supabase server keeps timing out: check the supabase server logs")),
        (
            "w2.supabase_write",
            write(w2, web, "lib/supabase/server.ts", "import { createServerClient } from '@supabase/ssr'\n"),
        ),
        ("w2.intl", prompt(w2, web, "Привет мир: исправь ошибку в модуле оплаты; 東京 サーバー; مرحبا بالعالم")),
        # What answers questions sits at the end of long texts (issue #14): each one's last words are searched.
        # An earlier session of the CLI project, so that sess-cli-1 stays the project's latest.
        # A command seldom says what it was for; the prompt of its turn does.
        ("c2.prompt", prompt(c2, cli, _LONG_PROMPT)),
        ("c2.dash", claude_bash(c2, cli, "uv run streamlit run dashboard.py", "You can now view your Streamlit app")),
        ("c2.compact", claude_event("PostCompact", c2, cli, trigger="auto", compact_summary=_COMPACT_SUMMARY)),
        ("c2.test_tail", failure(c2, cli, "python -m pytest tests/test_refunds.py", _LONG_FAILURE)),
        ("c2.stop", claude_event("Stop", c2, cli, stop_hook_active=False, last_assistant_message=_FINAL_MESSAGE)),
        ("c1.prompt", prompt(c1, cli, "add a --verbose flag to the export command")),
        ("c1.stems", prompt(c1, cli, "write down the conflict resolution rules for merges")),
        ("c1.camel", claude_edit(c1, cli, "src/tui/layout.rs", "fn old() {}", "fn paneCreation(tab: Tab) {}")),
        ("c1.words", prompt(c1, cli, "log every tab split during window layout")),
        ("c1.edit_auth", claude_edit(c1, cli, "src/auth.ts", "token = None", "token = load_token()")),
        ("c1.cat_dash", claude_bash(c1, cli, "cat metrics/dashboard.json", '{"panels": []}')),
        # Words side by side beat the same words apart (SUBMODULE_TOKEN: "submodule ... token").
        ("c1.token_far", prompt(c1, cli, "the release workflow cannot clone a submodule: is the token's scope wrong?")),
        ("c1.token_near", claude_bash(c1, cli, "gh secret set SUBMODULE_TOKEN", "Set secret for the sync workflow")),
        # ... and a word dropped from between them in the query may stand between them in the row too.
        ("c1.sb_far", write(c1, cli, "docs/storybook.md", "# storybook\nopen it with yarn; storybook, yarn\n")),
        ("c1.sb_near", claude_bash(c1, cli, "yarn dev storybook --ci", "Storybook started on port 6006")),
        ("c1.cargo", claude_bash(c1, cli, "cargo build --release", "Finished release [optimized] target(s) in 41.2s")),
        # A word standing alone beats the same word inside a kebab-case name.
        ("w2.nix_whole", claude_bash(w2, web, "nix build --rebuild --show-trace .#wombat", "built")),
        ("w2.nix_part", claude_bash(w2, web, "nix build --rebuild .#wombat-simple", "built")),
        # The project's own path, named by every row that prints it, says nothing about the row.
        ("w2.image", claude_bash(w2, web, "docker build --no-cache --progress=plain --pull -t webapp .", "built 3f9a")),
        ("w2.in_dir", claude_bash(w2, web, f"docker build {web}", "Successfully built 3f9a")),
        # A word that names a kind of work is searched too: the output that says "error".
        ("w2.billing_doc", write(w2, web, "docs/billing.md", "# Billing API\n\nHow the billing API charges cards.\n")),
        (
            "w2.billing_curl",
            claude_bash(w2, web, "curl -s localhost:3000/api/billing", '{"error": "billing key expired"}'),
        ),
    ]


_LONG_PROMPT = (  # as people write them: the words of the question after a first line about something else
    "I'm following the walkthrough in docs/setup.md and I'm stuck on step four, the one about the data folder."
    " Nothing shows up in the browser, and the terminal prints a wall of warnings about deprecated options that"
    " I don't understand. Can you take a look at the project, figure out what it needs (dependencies,"
    " environment variables) and start the metrics dashboard for the nightly numbers?"
)
_FILLER = "".join(f"- note {i}: lorem ipsum dolor sit amet, consectetur adipiscing elit\n" for i in range(120))
_COMPACT_SUMMARY = (  # ~8 KB, as real ones: the sections a resumed session needs come last
    "This session is being continued from a previous conversation.\n1. Primary Request and Intent:\n"
    f"{_FILLER}8. Pending Tasks:\n- wire the quokkaledger export\n9. Next Step: run the quokkaledger migration\n"
)
_LONG_FAILURE = (  # pytest prints the verdict last, after hundreds of lines
    "Exit code 1\n"
    + "".join(f"tests/test_refunds.py::test_case_{i} PASSED\n" for i in range(300))
    + "FAILED tests/test_refunds.py::test_wallaby_refund - AssertionError: 3 != 4\n"
    + "==== 1 failed, 300 passed in 2.31s ===="
)
_FINAL_MESSAGE = f"Here is what changed.\n{_FILLER}In short: the numbat cache is invalidated before each run."


# --- the corpus: built once, read by every test -----------------------------------------------


@dataclass
class Corpus:
    env: dict[str, str]
    short_dir: str
    db: Path
    web: str
    cli: str
    t_fixtures_done: float
    ids: dict[str, int] = field(default_factory=dict)

    def conn(self) -> sqlite3.Connection:
        return readers.open_readonly(str(self.db))

    def daemon(self) -> Daemon:
        return Daemon(self.env, self.short_dir)


def _git_project(root: Path, name: str) -> str:
    path = root / name
    (path / ".git").mkdir(parents=True)
    (path / "src").mkdir()
    return str(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    base = tmp_path_factory.mktemp("corpus")
    short = tempfile.mkdtemp(prefix="nm", dir="/tmp")
    env = {
        "NMEM_HOME": str(base / "home"),
        "NMEM_SOCKET": os.path.join(short, "run", "nmemd.sock"),
        "NMEM_AUTOSTART": "0",
    }
    web, cli = _git_project(base, "webapp"), _git_project(base, "cli-tool")
    daemon = Daemon(env, short)
    daemon.start()
    names: list[str] = []
    try:
        for name, body in hook_payloads():
            assert run_send(json.dumps(body).encode(), env=env).returncode == 0
            names.append(f"fx:{name}")
        t_mid = time.time()
        for name, body in synthetic(web, cli):
            assert run_send(json.dumps(body).encode(), env=env).returncode == 0
            names.append(name)
    finally:
        daemon.stop()
    c = Corpus(env=env, short_dir=short, db=daemon.db, web=web, cli=cli, t_fixtures_done=t_mid)
    conn = c.conn()
    try:
        order = [r[0] for r in conn.execute("SELECT observation_id FROM events ORDER BY received_at, observation_id")]
    finally:
        conn.close()
    assert len(order) == len(names) and len(set(order)) == len(order), "every event is its own observation"
    c.ids = dict(zip(names, order, strict=True))
    yield c
    shutil.rmtree(short, ignore_errors=True)


# --- the query table --------------------------------------------------------------------------

FX = "fx:hooks.jsonl"
LEGACY = "fx:hooks-legacy.jsonl"

# (query, filters, expected top result). Filters use placeholders resolved per corpus:
# "WEB"/"CLI" projects, "MID" = the time between the fixtures and the synthetic events.
QUERIES: list[tuple[str, dict[str, Any], str]] = [
    # identifiers
    ("save_hook", {}, "w1.edit_auth"),
    ("useState", {}, "w1.edit_login"),
    ("stripe_connector", {}, "w1.pytest_fail"),
    ("load_token", {}, "c1.edit_auth"),
    ("cost_tiers", {}, f"{FX}:11"),
    # paths
    ("src/auth.ts", {"project": "WEB"}, "w1.edit_auth"),
    ("auth.ts", {"project": "CLI"}, "c1.edit_auth"),
    ("src/billing/invoice.py", {}, "w2.edit_invoice"),
    ("hooks.json.template", {}, f"{FX}:13"),  # the edit beats the PreToolUse/PermissionRequest events
    # error text
    ("ModuleNotFoundError", {}, "w1.pytest_fail"),
    ('"Cannot read properties of undefined"', {}, "w2.build_fail"),
    ("notes-sync", {}, f"{FX}:19"),
    ("does NOT exist", {}, f"{FX}:20"),  # operator words are plain words
    # prompts
    ("login redirect", {}, "w1.prompt"),
    ('"decimal amounts"', {}, "w2.prompt"),
    ("verbose flag", {}, "c1.prompt"),
    ("lint hooks", {}, f"{FX}:2"),  # the prompt beats the todo list and the edited hook template
    # commands
    ("docker compose postgres", {}, "w2.docker"),
    ("cargo build", {}, "c1.cargo"),
    ("npm run build", {}, "w2.build_fail"),
    ("ledgerkit", {}, f"{LEGACY}:4"),
    # prefix and phrase
    ("authentic*", {}, "w1.write_doc"),
    ("auth*", {"types": ["write"]}, "w1.write_doc"),
    ('"measure hook overhead"', {}, f"{FX}:18"),
    # non-Latin scripts
    ("ошибку", {}, "w2.intl"),
    ("مرحبا", {}, "w2.intl"),
    ("東京", {}, "w2.intl"),
    ("サーバ", {}, "w2.intl"),  # the start of an unspaced run (サーバー)
    # questions as an agent asks them: stop words dropped, a missing word empties nothing, hints rank
    ("which file did we edit to use decimal amounts?", {}, "w2.edit_invoice"),  # edit beats the prompt
    ("what did the payments tests fail with?", {}, "w1.pytest_fail"),
    ("how do we start the postgres container for the webapp", {}, "w2.docker"),
    ("stripe_connector nonexistentword", {}, "w1.pytest_fail"),
    ("which module was missing?", {"project": "WEB"}, "w1.pytest_fail"),  # "missing": an error
    ("what did the numbat cache answer?", {"project": "CLI"}, "c2.stop"),  # one unknown word empties nothing
    ("Authentication signed rotated", {}, "w1.write_doc"),  # every word in one row ranks it first
    ("what command checks the redirect-loop", {}, "w1.test_ok"),  # hyphenated words: both, anywhere
    # the command holds one of the words, its turn's prompt the others: it beats one that holds two
    ("what command starts the metrics dashboard?", {"types": ["command"]}, "c2.dash"),
    # tokens that meet: stems, identifier parts
    ("resolving merge conflicts", {}, "c1.stems"),  # resolving / resolution
    ("pane creation", {}, "c1.camel"),  # two words find the camelCase identifier
    ("tabSplit", {}, "c1.words"),  # the identifier finds its words
    ("supabase server client", {}, "w2.supabase_write"),  # "client" in createServerClient
    ("submodule workflow token", {}, "c1.token_near"),  # two of the words side by side
    ("yarn the storybook", {"project": "CLI"}, "c1.sb_near"),  # "the" dropped: one word may stand between
    ("nix build wombat", {"project": "WEB"}, "w2.nix_whole"),  # .#wombat, not .#wombat-simple
    ("docker webapp", {"project": "WEB"}, "w2.image"),  # not the project's path in the command
    ("billing api error", {"project": "WEB"}, "w2.billing_curl"),  # "error": a hint, and a word too
    # filters: type, project, session, file, time
    ("src/auth.ts", {"types": ["read"]}, "w2.reread_auth"),  # equal reads: the newer first
    ("auth.ts", {"session_id": "sess-cli-1"}, "c1.edit_auth"),
    ("Edit", {"file": "invoice.py"}, "w2.edit_invoice"),
    ("useEffect", {"types": ["search"], "project": "WEB"}, "w1.grep"),
    ("Session started", {"since": "MID"}, "w1.start"),
    ("Session started startup", {"until": "MID"}, f"{FX}:0"),
    # the ends of long texts: a compaction summary's next step, a failure's verdict, a turn's final message
    ("quokkaledger", {}, "c2.compact"),
    ("test_wallaby_refund", {}, "c2.test_tail"),
    ('"1 failed, 300 passed"', {}, "c2.test_tail"),
    ("numbat", {}, "c2.stop"),
    ("numbat", {"types": ["stop"], "project": "CLI"}, "c2.stop"),
]


def _filters(c: Corpus, spec: dict[str, Any]) -> Filters:
    values = {"WEB": c.web, "CLI": c.cli, "MID": c.t_fixtures_done}
    return Filters(**{k: values.get(v, v) if isinstance(v, str) else v for k, v in spec.items()})


@pytest.mark.parametrize(("text", "spec", "expected"), QUERIES, ids=[q[0] + repr(q[1]) for q in QUERIES])
def test_query_table(corpus: Corpus, text: str, spec: dict[str, Any], expected: str) -> None:
    conn = corpus.conn()
    try:
        hits = search.search(conn, text, _filters(corpus, spec))
    finally:
        conn.close()
    assert hits, f"no result for {text!r}"
    names = {v: k for k, v in corpus.ids.items()}
    assert hits[0].id == corpus.ids[expected], [(names[h.id], h.title, h.score) for h in hits[:5]]
    f = _filters(corpus, spec)
    for h in hits:  # every filter holds on every hit, not only the top one
        assert f.project in (None, h.project)
        assert not f.types or h.type in f.types
        assert f.session_id in (None, h.session_id)
        assert f.since is None or h.ts >= f.since
        assert f.until is None or h.ts <= f.until


def test_phrase_is_ordered_and_a_missing_word_empties_nothing(corpus: Corpus) -> None:
    conn = corpus.conn()
    try:
        assert search.search(conn, '"amounts decimal"') == []
        # OR is a word, not an operator; a word no row holds leaves the others to find what they find
        assert isinstance(search.search(conn, "what was the"), list)  # only stop words: searched as typed
        found = search.search(conn, "decimal OR nonexistentword")
        assert found and [h.id for h in found] == [h.id for h in search.search(conn, "decimal")]
        assert len(search.search(conn, "auth*", limit=200)) > len(search.search(conn, "auth", limit=200))
        assert search.search(conn, "cargo", Filters(project=corpus.web)) == []
    finally:
        conn.close()


# --- hostile queries --------------------------------------------------------------------------

HOSTILE = [
    '"',
    '""',
    '"""',
    "*",
    "**",
    "auth**",
    "(",
    ")",
    "()",
    "(auth",
    "-",
    "-auth",
    ":",
    "title:auth",
    "^",
    "^auth",
    "+",
    "a+b",
    "AND",
    "OR",
    "NOT",
    "NEAR",
    "NEAR(auth token)",
    "auth AND",
    "OR OR OR",
    "NOT NOT",
    '" * ( ) - : ^ + AND OR NOT NEAR',
    '"unbalanced',
    "col:",
    "{title}: x",
    "'",
    "\\",
    "%",
    "_",
    "[x]",
    "",
    " ",
    "\t\n ",
    "x" * 10_000,
    "auth " * 2_000,
    "東京 サーバー",
    "Привет",
    "مرحبا",
    "🎉",
    "🎉 auth",
    "\x00",
    "auth\x00token",
    "a\x00",
    "\ud800",
    "\udcff auth",
    "\U0010ffff",
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_queries_answer_or_refuse_cleanly(corpus: Corpus, text: str) -> None:
    """Refused (one-line QueryError) exactly when nothing word-like is left; otherwise a plain answer."""
    conn = corpus.conn()
    try:
        if re.search(r"\w", text) is None:
            with pytest.raises(QueryError, match="^the query has nothing to search for"):
                search.search(conn, text)
        else:
            assert isinstance(search.search(conn, text), list)
    finally:
        conn.close()


def test_hostile_text_means_what_its_words_mean(corpus: Corpus) -> None:
    conn = corpus.conn()
    try:

        def ids(text: str) -> list[int]:
            return [h.id for h in search.search(conn, text)]

        assert ids("auth\x00token") == ids("auth token")  # NUL separates words
        assert ids("auth token")[0] == corpus.ids["c1.edit_auth"]  # the row with both words first
        assert ids("\udcff auth") == ids("🎉 auth") == ids("(auth") == ids("auth " * 2_000) == ids("auth")
        assert ids('" * ( ) - : ^ + AND OR NOT NEAR') == []  # the words AND/OR/NOT/NEAR, all at once
    finally:
        conn.close()


_OPERATORS = '" * ( ) - : ^ + { } , NEAR( auth* save_hook'.split()
_FTS_BITS = st.sampled_from([*_OPERATORS, " AND ", " OR ", " NOT ", " NEAR ", " ", "\x00", "\ud800", "\udfff"])
_ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=8)  # every category, surrogates included


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.lists(st.one_of(_FTS_BITS, _ANY_TEXT), max_size=12).map("".join))
def test_any_text_is_a_result_or_a_query_error(corpus: Corpus, text: str) -> None:
    """Property: no text makes fts_query or search raise anything but QueryError."""
    conn = corpus.conn()
    try:
        try:
            match = queries.fts_query(text)
        except QueryError:
            return
        relaxed = fts.relax(match)  # the index holds no positions: phrases go as their words (m008)
        sql = "SELECT count(*) FROM observations_fts WHERE observations_fts MATCH ?"
        conn.execute(sql, (relaxed.match if relaxed else match,)).fetchone()
        try:
            search.search(conn, text, Filters(project=corpus.web))
        except QueryError:
            pass
    finally:
        conn.close()


# --- through the CLI: with and without a daemon -----------------------------------------------


def _json_ids(done: subprocess.CompletedProcess[bytes]) -> list[int]:
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    for row in rows:
        assert {"id", "type", "project", "session_id", "ts", "title"} <= row.keys()
    return [row["id"] for row in rows]


HOSTILE_ARGV: list[list[str | bytes]] = [
    *(
        ["search", "--all", q]
        for q in ['"', "*", "( ) - : ^ +", "AND OR NOT NEAR", " ", "x" * 10_000, "東京", "Привет", "مرحبا", "🎉"]
    ),
    ["search", "--all", b"\xff\xfe auth"],  # undecodable argv arrives as lone surrogates
    ["search", "--all", b"\xed\xa0\x80"],  # an encoded lone surrogate
    ["search", "--project", b"/tmp/\xff", "auth"],
    ["show", "99999999999999999999999"],
    ["timeline", "424242"],
]


def _cli_checks(c: Corpus) -> None:
    """Every invocation at once (each is a fresh interpreter), then the expectations."""
    ids = c.ids
    calls: dict[str, tuple[list[str | bytes], str | None]] = {
        "identifier": (["search", "save_hook", "--json"], c.web),
        "default_project": (["search", "auth.ts", "--json"], os.path.join(c.cli, "src")),
        "path": (["search", "src/auth.ts", "--json"], c.web),
        "other_project": (["search", "cargo", "--json"], c.web),
        "all": (["search", "cargo", "build", "--all", "--json"], None),
        "type": (["search", "cost_tiers", "--all", "--type", "read", "--json"], None),
        "session": (["search", "auth.ts", "--all", "--session", "sess-cli-1", "--json"], None),
        "phrase": (["search", '"decimal amounts"', "--project", c.web, "--json"], None),
        "file": (["search", "Edit", "--all", "--file", "invoice.py", "--json"], None),
        "since": (["search", "save_hook", "--all", "--since", "1h", "--json"], None),
        "until": (["search", "save_hook", "--all", "--until", "2000-01-01", "--json"], None),
        "table": (["search", "save_hook"], c.web),
        "show": (["show", str(ids["w1.pytest_fail"]), "--json"], None),
        "timeline": (["timeline", str(ids["w1.test_ok"]), "--before", "1", "--after", "1", "--json"], None),
        "sessions": (["sessions", "--json"], c.web),
    }
    calls |= {f"hostile{i}": (argv, None) for i, argv in enumerate(HOSTILE_ARGV)}
    with ThreadPoolExecutor(max_workers=8) as pool:
        done = dict(
            zip(
                calls,
                pool.map(
                    lambda call: nmem_bytes(*call[0], env=c.env, cwd=call[1], timeout=CLI_TIMEOUT_S), calls.values()
                ),
                strict=True,
            )
        )

    assert _json_ids(done["identifier"])[0] == ids["w1.edit_auth"]
    assert _json_ids(done["default_project"])[0] == ids["c1.edit_auth"]  # the cwd's git top-level
    assert _json_ids(done["path"])[0] == ids["w1.edit_auth"]
    assert _json_ids(done["other_project"]) == []
    assert _json_ids(done["all"])[0] == ids["c1.cargo"]
    assert _json_ids(done["type"])[0] == ids[f"{FX}:11"]
    assert _json_ids(done["session"]) == [ids["c1.edit_auth"]]
    assert _json_ids(done["phrase"])[0] == ids["w2.prompt"]
    assert _json_ids(done["file"]) == [ids["w2.edit_invoice"]]
    assert _json_ids(done["since"]) == [ids["w1.edit_auth"]] and _json_ids(done["until"]) == []
    table = done["table"]
    assert table.returncode == 0 and str(ids["w1.edit_auth"]).encode() in table.stdout
    assert b"src/auth.ts" in table.stdout
    assert done["show"].returncode == 0 and "stripe_connector" in json.loads(done["show"].stdout)["content"]
    assert _json_ids(done["timeline"]) == [ids["w1.edit_login"], ids["w1.test_ok"], ids["w1.pytest_fail"]]
    sessions = [json.loads(line) for line in done["sessions"].stdout.splitlines()]
    assert {row["session_id"] for row in sessions} == {"sess-web-1", "sess-web-2"}
    for i, argv in enumerate(HOSTILE_ARGV):  # results (exit 0) or one clear line (exit 1), never a traceback
        proc = done[f"hostile{i}"]
        assert proc.returncode in (0, 1), (argv, proc.stderr)
        assert b"Traceback" not in proc.stderr + proc.stdout, argv
        if proc.returncode == 1:
            assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith(b"error: "), (argv, proc)


def test_cli_without_a_daemon(corpus: Corpus) -> None:
    _cli_checks(corpus)


def test_cli_with_a_daemon(corpus: Corpus) -> None:
    daemon = corpus.daemon()
    daemon.start()
    try:
        _cli_checks(corpus)
        bad = nmem_bytes("search", "--all", '"', env=corpus.env, timeout=CLI_TIMEOUT_S)
        assert bad.returncode == 1 and b"nothing to search for" in bad.stderr  # the reason, not just "refused"
    finally:
        assert daemon.stop() == 0


def test_rpc_validates_params_and_names_the_bad_one(corpus: Corpus) -> None:
    daemon = corpus.daemon()
    daemon.start()

    def rpc(method: str, params: Any) -> tuple[bytes, bytes]:
        body = json.dumps({"method": method, "params": params}).encode()
        return send_frame(corpus.env["NMEM_SOCKET"], protocol.KIND_RPC, protocol.NO_EVENT_ID, body)

    try:
        status, body = rpc("search", {"query": "save_hook", "project": corpus.web, "limit": 3})
        assert status == b"OK" and json.loads(body)[0]["id"] == corpus.ids["w1.edit_auth"]
        status, body = rpc("show", {"ids": [corpus.ids["c1.cargo"]]})
        assert status == b"OK" and json.loads(body)[0]["command"] == "cargo build --release"
        status, body = rpc("recent", {"project": corpus.cli, "limit": 1})
        assert status == b"OK" and json.loads(body)[0]["id"] == corpus.ids["c1.cargo"]
        status, body = rpc("file_history", {"path": "src/auth.ts", "project": corpus.web})
        assert status == b"OK" and [h["id"] for h in json.loads(body)] == [
            corpus.ids["w2.reread_auth"],
            corpus.ids["w1.read_auth"],
            corpus.ids["w1.edit_auth"],
        ]
        status, body = rpc("sessions", {"project": corpus.cli})
        assert status == b"OK" and json.loads(body)[0]["first_prompt"].startswith("add a --verbose flag")
        for method, params, needle in [
            ("search", {"query": "x", "limit": "ten"}, b"'limit'"),
            ("search", {"query": "x", "limit": 0}, b"'limit'"),
            ("search", {}, b"`query`"),
            ("search", {"query": "x", "colour": "red"}, b"`colour`"),
            ("search", {"query": "x", "types": ["bogus"]}, b"unknown type 'bogus'"),
            ("search", {"query": '"'}, b"nothing to search for"),
            ("show", {"ids": []}, b"'ids'"),
            ("show", {"ids": [2**70]}, b"'ids[0]'"),
            ("timeline", {"id": 424242}, b"no observation with id 424242"),
            ("timeline", {"id": 1, "before": -1}, b"'before'"),
            ("file_history", {"path": "  "}, b"file path is empty"),
            ("nope", {}, b"unknown method 'nope'"),
        ]:
            status, reply = rpc(method, params)
            kind = b"UnknownMethod " if method == "nope" else b"QueryError "  # the daemon's error, by its kind
            assert status == b"ERR" and reply.startswith(kind) and needle in reply, (method, params, reply)
    finally:
        assert daemon.stop() == 0
