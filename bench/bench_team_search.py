"""Search on a team server holding a 10,000,000-observation team (issue #30).

Starts its own PostgreSQL cluster in a temporary folder (tests/support/pg_cluster.py), creates nmem's
schema with `nmem team init`'s code and a member with `add-member`'s, then COPYs `--rows` generated
observations into one team: 40 projects, 25 authors, titles and bodies that mix English words
(Zipf-like), snake_case / camelCase / CONSTANT identifiers, file paths, commands and error lines.
The load runs with triggers off (session_replication_role = replica, as a restore would) and the
secondary indexes are built after it; then VACUUM ANALYZE. Searches run as the member (row-level
security on) through `nmemd.team.server_search.search_team`, over a set of realistic queries,
rounds alternating the query order; p50/p99 per kind and overall (targets p50 <= 50 ms,
p99 <= 200 ms).

    .venv/bin/python bench/bench_team_search.py --rows 10000000
    .venv/bin/python bench/bench_team_search.py --rows 200000 --rounds 5   # a quick run
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import random
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import psycopg  # noqa: E402
from common import percentile, print_machine  # noqa: E402
from support import pg_cluster  # noqa: E402

from nmemd.team import admin, server_search  # noqa: E402

TEAM = "acme"
SERVER_SETTINGS = {
    "shared_buffers": "1GB",
    "maintenance_work_mem": "1GB",
    "max_wal_size": "16GB",
    "checkpoint_timeout": "30min",
    "wal_level": "minimal",
    "max_wal_senders": "0",
    "synchronous_commit": "off",
    "max_parallel_maintenance_workers": "1",
}

# (kind, query, author filter) -- terms the generator plants at known rates, plus absent ones.
QUERIES = [
    ("words", "flaky websocket test", None),
    ("words", "migration failed", None),
    ("words", "fix login redirect", None),
    ("words", "cache invalidation", None),
    ("words", "timeout", None),
    ("words", "deploy", None),
    ("words", "update the dependencies", None),
    ("words", "memory leak in the worker", None),
    ("words", "race condition", None),
    ("words", '"connection pool exhausted"', None),
    ("identifier", "parse_config", None),
    ("identifier", "useEffect", None),
    ("identifier", "ERR_CONNECTION_REFUSED", None),
    ("identifier", "handle_request", None),
    ("identifier", "MAX_RETRIES", None),
    ("identifier", "orderLedgerReconciler", None),
    ("path", "src/api/routes.py", None),
    ("path", "routes.py", None),
    ("path", "tests/ws_test.py", None),
    ("path", "package.json", None),
    ("path", "web/src/components/Modal.tsx", None),
    ("error", "TypeError: Cannot read properties of undefined", None),
    ("error", "ModuleNotFoundError: No module named yaml", None),
    ("command", "pytest -k ws", None),
    ("command", "npm run build", None),
    ("command", "git rebase main", None),
    ("author", "flaky websocket test", "kim"),
    ("author", "deploy", "lee"),
    ("absent", "kubernetes ingress annotation", None),
    ("absent", "zyzzogeton", None),
]

# rounds rotate: every project, the largest (~1/4 of the rows), a small one (~0.5 %)
PROJECTS = [None, "github.com/acme/api", "github.com/acme/svc-20"]

COMMON = (
    "the a to of and in for is on with that this it was by from at as be are not fix test error run "
    "update add remove file build check use new change config value call return function class "
    "module import data user request response server client api code line now after before when "
    "then also but only should would could need make set get read write open close start stop "
    "failed passed works broken issue bug fixed added removed changed refactor cleanup handle "
    "missing wrong empty null default option flag path type name list map key item query result "
    "cache deploy timeout retry login redirect session token auth database migration schema index "
    "table column row field log debug trace warning message output input event hook job queue worker "
    "memory leak race condition lock thread process async await promise callback render component "
    "state props style layout page route handler middleware service container image docker release"
).split()
RARE_SYLLABLES = "ka lo mi nu re sa ti vo xe zu bra cle dri fo gra ple qui sto tra wex yon zel".split()
CMDS = [
    "pytest -k ws", "pytest -x tests/test_api.py", "npm run build", "npm test", "git rebase main",
    "git status", "cargo test", "make lint", "docker compose up -d", "ruff check .", "go test ./...",
    "uv run mypy src", "npm run dev", "git push origin HEAD", "kubectl get pods",
]  # fmt: skip
ERRORS = [
    "TypeError: Cannot read properties of undefined (reading 'map')",
    "ModuleNotFoundError: No module named 'yaml'",
    "ERR_CONNECTION_REFUSED 127.0.0.1:5432",
    "AssertionError: expected 200, got 500",
    "psycopg.OperationalError: connection pool exhausted",
    "panic: runtime error: index out of range",
    "SyntaxError: Unexpected token '<'",
    "KeyError: 'user_id'",
    "TimeoutError: timed out after 30s",
]
KINDS = ["edit", "command", "read", "search", "error", "decision", "test", "prompt"]
AGENTS = ["claude-code", "codex", "gemini", "copilot", "opencode"]


def zipf_weights(n: int, s: float = 1.05) -> list[float]:
    return [1.0 / (i + 1) ** s for i in range(n)]


class Generator:
    """Deterministic rows: every pool and rate fixed by `seed`."""

    def __init__(self, seed: int = 30) -> None:
        rnd = self.rnd = random.Random(seed)
        rare = {"".join(rnd.choices(RARE_SYLLABLES, k=rnd.randint(2, 4))) for _ in range(60_000)}
        self.words = COMMON + sorted(rare)
        self.word_cum = list(itertools.accumulate(zipf_weights(len(self.words))))
        parts = sorted({w for w in self.words if len(w) > 2})[:4000]
        idents = set()
        for _ in range(30_000):
            a, b, c = rnd.sample(parts, 3)
            style = rnd.random()
            if style < 0.4:
                idents.add(f"{a}_{b}" if rnd.random() < 0.6 else f"{a}_{b}_{c}")
            elif style < 0.75:
                idents.add(a + b.capitalize() + (c.capitalize() if rnd.random() < 0.3 else ""))
            else:
                idents.add(f"{a}_{b}".upper())
        planted = ["parse_config", "useEffect", "ERR_CONNECTION_REFUSED", "handle_request", "MAX_RETRIES"]
        self.idents = planted + sorted(idents) + ["orderLedgerReconciler"]
        self.ident_cum = list(itertools.accumulate(zipf_weights(len(self.idents), 0.9)))
        dirs = ["src", "src/api", "src/core", "lib", "tests", "web/src/components", "web/src/hooks", "cmd", "pkg/db"]
        exts = [".py", ".ts", ".tsx", ".go", ".rs", ".md", ".json", ".yaml", ".sql"]
        paths = {f"{rnd.choice(dirs)}/{rnd.choice(parts)}{rnd.choice(['', '_' + rnd.choice(parts)])}{rnd.choice(exts)}"
                 for _ in range(40_000)}  # fmt: skip
        self.paths = ["src/api/routes.py", "tests/ws_test.py", "package.json", "Dockerfile"] + sorted(paths)
        self.paths += ["web/src/components/Modal.tsx"]
        self.path_cum = list(itertools.accumulate(zipf_weights(len(self.paths), 0.9)))
        self.projects = [f"github.com/acme/{n}" for n in ("api", "web", "infra", "mobile", "billing")] + [
            f"github.com/acme/svc-{i}" for i in range(35)
        ]
        self.project_cum = list(itertools.accumulate(zipf_weights(len(self.projects), 1.2)))
        self.authors = ["kim", "lee"] + [f"dev{i:02d}" for i in range(23)]
        self.start = dt.datetime(2025, 1, 1, tzinfo=dt.UTC).timestamp()
        self.phrases = [
            "the websocket test is flaky again",
            "migration failed on the staging database",
            "fix login redirect loop after the session expires",
            "cache invalidation on deploy",
            "memory leak in the worker pool",
            "connection pool exhausted under load",
            "update the dependencies and rerun the build",
        ]

    def _words(self, k: int) -> list[str]:
        return self.rnd.choices(self.words, cum_weights=self.word_cum, k=k)

    def row(self, n: int, rows: int) -> str:
        rnd = self.rnd
        kind = KINDS[n % len(KINDS)] if rnd.random() < 0.5 else rnd.choice(KINDS)
        files = rnd.choices(self.paths, cum_weights=self.path_cum, k=rnd.choice((0, 1, 1, 1, 2, 3)))
        ident = rnd.choices(self.idents, cum_weights=self.ident_cum, k=2)
        cmd = rnd.choice(CMDS)
        if kind == "edit" and files:
            title = f"Edited {files[0]}: {' '.join(self._words(4))} {ident[0]}"
        elif kind == "command":
            title = f"Ran `{cmd}`: exit {rnd.choice((0, 0, 0, 1, 2))}"
        elif kind == "error":
            title = f"Error in {ident[0]}: {rnd.choice(ERRORS)}"
        elif kind == "read" and files:
            title = f"Read {files[0]}"
        else:
            title = " ".join(self._words(rnd.randint(4, 9))).capitalize()
        body = self._words(rnd.randint(12, 30))
        body.insert(rnd.randrange(len(body)), ident[1])
        if files:
            body.insert(rnd.randrange(len(body)), files[-1])
        if rnd.random() < 0.04:
            body.insert(rnd.randrange(len(body)), rnd.choice(self.phrases))
        text = " ".join(body)
        if kind in ("command", "test"):
            text += f"\n$ {cmd}\n" + (rnd.choice(ERRORS) if rnd.random() < 0.3 else "ok")
        elif kind == "error":
            text += "\n" + rnd.choice(ERRORS)
        project = rnd.choices(self.projects, cum_weights=self.project_cum)[0]
        created = self.start + n * (330 * 86400 / rows) + rnd.random()
        author = self.authors[int(rnd.paretovariate(1.2)) % len(self.authors)]
        fields = [
            TEAM, project, uuid.UUID(int=rnd.getrandbits(128), version=4).hex, "0", author,
            f"{author}-laptop", rnd.choice(AGENTS), f"s{n // 40}", kind, title, text,
            "{" + ",".join(f'"{f}"' for f in files) + "}",
            dt.datetime.fromtimestamp(created, dt.UTC).isoformat(),
        ]  # fmt: skip
        return "\t".join(f.replace("\\", "\\\\").replace("\t", " ").replace("\n", "\\n") for f in fields) + "\n"

    def rows(self, count: int) -> Iterator[str]:
        for n in range(count):
            yield self.row(n, count)


COLUMNS = "team, project, event_id, ordinal, author, machine, agent, session_id, kind, title, body, files, created_at"


def load(dsn: str, rows: int) -> None:
    """COPY `rows` generated observations, triggers off, the secondary indexes built afterwards."""
    gen = Generator()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'nmem' AND tablename = 'observations'"
            " AND indexname NOT LIKE '%%pkey'"
        ).fetchall()
        for name, _ in indexes:
            constraint = conn.execute(
                "SELECT conname FROM pg_constraint WHERE conname = %s AND conrelid = 'nmem.observations'::regclass",
                (name,),
            ).fetchone()
            if constraint:
                conn.execute(f'ALTER TABLE nmem.observations DROP CONSTRAINT "{name}"')
            else:
                conn.execute(f'DROP INDEX nmem."{name}"')
        t0 = time.monotonic()
        with conn.cursor() as cur, cur.copy(f"COPY nmem.observations ({COLUMNS}) FROM STDIN") as copy:
            chunk: list[str] = []
            for i, line in enumerate(gen.rows(rows), 1):
                chunk.append(line)
                if len(chunk) == 5000:
                    copy.write("".join(chunk))
                    chunk = []
                if i % 500_000 == 0:
                    print(f"  {i:,} rows in {time.monotonic() - t0:.0f} s", flush=True)
            if chunk:
                copy.write("".join(chunk))
        print(f"COPY {rows:,} rows: {time.monotonic() - t0:.0f} s", flush=True)
        conn.execute("SELECT setval('nmem.feed_seq', (SELECT max(seq) FROM nmem.observations))")
        for name, definition in indexes:
            t1 = time.monotonic()
            if name.endswith("_key"):
                conn.execute("ALTER TABLE nmem.observations ADD UNIQUE (team, event_id, ordinal)")
            else:
                conn.execute(definition)
            print(f"index {name}: {time.monotonic() - t1:.0f} s", flush=True)
        t1 = time.monotonic()
        conn.execute("VACUUM (ANALYZE) nmem.observations")
        print(f"VACUUM ANALYZE: {time.monotonic() - t1:.0f} s", flush=True)
        size = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('nmem.observations'))").fetchone()
        print(f"table with its indexes: {size[0] if size else '?'}", flush=True)


async def measure(dsn: str, rounds: int, timeout_ms: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        for _, query, author in QUERIES:  # warm-up: the first touch of each index reads it from disk
            await server_search.search_team(
                conn, team=TEAM, project=None, query=query, limit=10, author=author, timeout_ms=timeout_ms
            )
        times: dict[str, list[float]] = {}
        by_project: dict[str, list[float]] = {}
        hits: dict[str, int] = {}
        failures: dict[str, str] = {}
        rnd = random.Random(7)
        for r in range(rounds):
            order = list(QUERIES)
            rnd.shuffle(order)
            for kind, query, author in order:
                project = PROJECTS[r % len(PROJECTS)]
                key = f"{kind}: {query}" + (f" (author {author})" if author else "")
                t0 = time.perf_counter()
                try:
                    found = await server_search.search_team(
                        conn, team=TEAM, project=project, query=query, limit=10, author=author, timeout_ms=timeout_ms
                    )
                    hits[key] = len(found)
                except Exception as exc:  # a timeout counts at its full time, and is shown
                    failures[key] = str(exc)
                took = (time.perf_counter() - t0) * 1000
                times.setdefault(key, []).append(took)
                by_project.setdefault(project or "every project", []).append(took)
        print(f"\n{'query':<62} {'p50 ms':>8} {'max ms':>8} {'hits':>5}")
        for key, values in times.items():
            print(f"{key[:62]:<62} {percentile(values, 50):8.1f} {max(values):8.1f} {hits.get(key, -1):5}")
        for key, message in failures.items():
            print(f"FAILED {key}: {message}")
        every = [v for values in times.values() for v in values]
        by_kind: dict[str, list[float]] = {}
        for key, values in times.items():
            by_kind.setdefault(key.split(":")[0], []).extend(values)
        print()
        for kind, values in [*by_kind.items(), *by_project.items()]:
            print(f"{kind:<24} p50 {percentile(values, 50):7.1f} ms  p99 {percentile(values, 99):7.1f} ms")
        p50, p99 = percentile(every, 50), percentile(every, 99)
        verdict = "PASS" if p50 <= 50 and p99 <= 200 else "FAIL"
        print(
            f"ALL {len(every)} searches: p50 {p50:.1f} ms, p99 {p99:.1f} ms (targets 50 / 200) {verdict};"
            f" {len(failures)} failed"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=12, help="passes over the query set (projects rotate)")
    parser.add_argument("--timeout-ms", type=int, default=2000, help="the search's server-side budget")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running (prints its DSNs)")
    parser.add_argument("--measure", metavar="MEMBER_DSN", help="only measure, on a cluster a --keep run left")
    args = parser.parse_args()
    print_machine()
    if args.measure:
        asyncio.run(measure(args.measure, args.rounds, args.timeout_ms))
        return
    started = time.monotonic()
    with pg_cluster.running_cluster(**SERVER_SETTINGS) as cluster:
        print(f"cluster in {cluster.root} (PostgreSQL from {cluster.bindir})", flush=True)
        db = cluster.database()
        database = db.__enter__()
        try:
            admin.init(database.admin_dsn, TEAM)
            member = admin.add_member(database.admin_dsn, TEAM, "kim")
            load(database.superuser_dsn, args.rows)
            print(f"built in {time.monotonic() - started:.0f} s", flush=True)
            asyncio.run(measure(member.dsn, args.rounds, args.timeout_ms))
            if args.keep:
                print(f"kept: member {member.dsn}\nsuperuser {database.superuser_dsn}\nCtrl-C stops it", flush=True)
                while True:
                    time.sleep(3600)
        finally:
            db.__exit__(None, None, None)


if __name__ == "__main__":
    main()
