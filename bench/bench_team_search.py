"""Team search on a server of 10,000,000 observations of real transcript text (issues #30, #40).

The rows are grown from the real Claude Code transcripts of ../shared/corpus (bench/team_corpus.py),
read at run time, copied and varied (about one word in eight replaced by a word drawn from the
corpus's own word frequencies, plus the odd hash or id a tool prints): three teams (80 / 15 / 5 %);
in the measured team 30 projects, one of them ~18.6 % of its rows (~1.5M at 10M), and 40 authors of
whom two are rare (~0.05 % and ~0.4 %). Rows come in work sessions (one author, one project, one
transcript walked in order) interleaved as several people push at once. COPY with triggers off and
the secondary indexes built after, then VACUUM ANALYZE; `--pgdata DIR` keeps the cluster there and
reuses it on the next run (say `--stop` to stop it).

The queries are picked from the corpus by how often they occur: common words and pairs, middling
and rare words, absent ones, phrases (common, middling, rare), identifiers and paths. Each runs in
five scopes: the whole team, the large project, a small project, a rare author, a rare author in
the large project; rounds alternate the order. Searches run as a member (row-level security on)
through `nmemd.team.server_search.search_team`, as the daemon calls it, with `--timeout-ms`.

`--baseline TREE` (a worktree of the commit to compare with, with its own .venv) builds the schema
with that tree's code, measures its search, migrates the server with this tree's code (timed), and
measures this tree's search: both in the same run, on the same rows.

    .venv/bin/python bench/bench_team_search.py --rows 10000000 --pgdata /work/s1-pg --baseline /work/base-s1
    .venv/bin/python bench/bench_team_search.py --rows 200000 --rounds 3   # a quick run
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import multiprocessing
import os
import pwd
import random
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import psycopg  # noqa: E402
from common import percentile, print_machine  # noqa: E402
from support import pg_cluster  # noqa: E402
from team_corpus import WORD, Record, sessions  # noqa: E402

TEAM = "acme"
LARGE = "github.com/acme/api"
SMALL = "github.com/acme/svc-12"
RARE = "rare1"  # ~0.05 % of the team's rows
RARE_IN_LARGE = "rare2"  # ~0.4 %
MEMBER = "kim"
BUDGET_MS = 1000  # the daemon's own budget for the server's part of a search (team.search.SERVER_BUDGET_S)
SERVER_SETTINGS = {
    "shared_buffers": "1GB",
    "maintenance_work_mem": "1GB",
    "max_wal_size": "4GB",
    "checkpoint_timeout": "30min",
    "wal_level": "minimal",
    "max_wal_senders": "0",
    "synchronous_commit": "off",
    "max_parallel_maintenance_workers": "1",
}
COLUMNS = "team, project, event_id, ordinal, author, machine, agent, session_id, kind, title, body, files, created_at"
AGENTS = ["claude-code", "codex", "gemini", "copilot", "opencode"]


# --- the rows --------------------------------------------------------------------------------------


def _weights(names: list[str], fixed: dict[str, float], s: float) -> list[float]:
    """Zipf-like weights over `names`, with `fixed` shares taken first."""
    rest = [n for n in names if n not in fixed]
    zipf = [1.0 / (i + 1) ** s for i in range(len(rest))]
    left = 1.0 - sum(fixed.values())
    scaled = dict(zip(rest, (w * left / sum(zipf) for w in zipf), strict=True))
    return [fixed.get(n, scaled.get(n, 0.0)) for n in names]


class Grower:
    """Deterministic rows from the corpus's records: every choice drawn from one seeded generator."""

    ACTIVE = 8  # work sessions interleaved at any time

    def __init__(self, corpus: list[list[Record]], seed: int = 40, worker: int = 0) -> None:
        self.rnd = random.Random(seed * 1000 + worker)
        self.worker = worker
        self.corpus = [[_CopyRecord(r) for r in s] for s in corpus]
        self.tokens = [_copy_field(t) for s in corpus for r in s for t in r.body.split(" ") if t]
        self.teams = [TEAM, "globex", "initech"]
        self.team_cum = list(itertools.accumulate([0.80, 0.15, 0.05]))
        self.projects = {
            TEAM: [LARGE, "github.com/acme/web", "github.com/acme/infra", "github.com/acme/mobile"]
            + [f"github.com/acme/svc-{i}" for i in range(26)],
            "globex": [f"github.com/globex/p{i}" for i in range(12)],
            "initech": [f"github.com/initech/p{i}" for i in range(6)],
        }
        self.project_cum = {
            t: list(itertools.accumulate(_weights(p, {LARGE: 0.186} if t == TEAM else {}, 0.9)))
            for t, p in self.projects.items()
        }
        self.authors = {
            TEAM: [MEMBER, "lee", RARE, RARE_IN_LARGE] + [f"dev{i:02d}" for i in range(36)],
            "globex": [f"gx{i:02d}" for i in range(15)],
            "initech": [f"in{i:02d}" for i in range(6)],
        }
        self.author_cum = {
            t: list(itertools.accumulate(_weights(a, {RARE: 0.0005, RARE_IN_LARGE: 0.004} if t == TEAM else {}, 1.0)))
            for t, a in self.authors.items()
        }
        self.start = dt.datetime(2025, 1, 1, tzinfo=dt.UTC).timestamp()
        self.sessions_started = 0

    def _session(self) -> dict[str, Any]:
        rnd = self.rnd
        team = rnd.choices(self.teams, cum_weights=self.team_cum)[0]
        source = rnd.randrange(len(self.corpus))
        self.sessions_started += 1
        author = rnd.choices(self.authors[team], cum_weights=self.author_cum[team])[0]
        project = rnd.choices(self.projects[team], cum_weights=self.project_cum[team])[0]
        return {
            "team": team,
            "head": f"{team}\t{project}",
            "tail": f"{author}\t{author}-laptop\t{rnd.choice(AGENTS)}\ts{self.worker}-{self.sessions_started:07d}",
            "records": self.corpus[source],
            "at": rnd.randrange(len(self.corpus[source])),
            "left": rnd.randint(20, 200),
        }

    def _vary(self, text: str) -> str:
        rnd, tokens = self.rnd.random, self.tokens
        words = text.split(" ")
        n, t = len(words), len(tokens)
        for _ in range(max(1, n // 8)):
            words[int(rnd() * n)] = tokens[int(rnd() * t)]
        if rnd() < 0.5:  # a hash, an id, a number: what tool output is full of
            words.insert(int(rnd() * n), f"{self.rnd.getrandbits(36):09x}")
        return " ".join(words)

    def rows(self, count: int, first: int = 0, total: int = 0, slots: dict[str, int] | None = None) -> Iterator[str]:
        """Rows `first` .. `first + count` of `total`, as COPY text lines; with `slots` (schema v2 on:
        each team's seq slot), each row's seq first, as the team's feed would have drawn it."""
        rnd = self.rnd
        active = [self._session() for _ in range(self.ACTIVE)]
        step = 500 * 86400 / max(total or count, 1)
        stamp = ""
        for n in range(first, first + count):
            if n % 64 == 0 or not stamp:
                stamp = dt.datetime.fromtimestamp(self.start + n * step, dt.UTC).isoformat()
            i = int(rnd.random() * self.ACTIVE)
            s = active[i]
            rec = s["records"][s["at"] % len(s["records"])]
            s["at"] += 1
            s["left"] -= 1
            if s["left"] <= 0:
                active[i] = self._session()
            title = self._vary(rec.title) if rnd.random() < 0.3 else rec.title
            body = self._vary(rec.body) if rec.body else ""
            seq = f"{(n + 1) * 65536 + slots[s['team']]}\t" if slots is not None else ""
            yield (
                f"{seq}{s['head']}\t{rnd.getrandbits(128):032x}\t0\t{s['tail']}\t{rec.kind}\t{title}\t{body}"
                f"\t{rec.files_copy}\t{stamp}\n"
            )


class _CopyRecord:
    """A record's fields as COPY text, escaped once."""

    __slots__ = ("body", "files_copy", "kind", "title")

    def __init__(self, r: Record) -> None:
        self.kind, self.title, self.body = r.kind, _copy_field(r.title), _copy_field(r.body)
        self.files_copy = _copy_field(
            "{" + ",".join('"' + f.replace("\\", "\\\\").replace('"', '\\"') + '"' for f in r.files) + "}"
        )


def _copy_field(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\t", " ").replace("\n", " ").replace("\r", " ").replace("\x00", "")


WORKERS = 2  # COPY streams, each with its own generator


def _copy_part(dsn: str, corpus: list[list[Record]], worker: int, first: int, count: int, total: int) -> None:
    grower = Grower(corpus, worker=worker)
    t0 = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        conn.execute("SET session_replication_role = replica")  # no triggers: v2's draws the seq, so it is given
        slots = None
        if conn.execute("SELECT to_regclass('nmem.feeds')").fetchone() != (None,):
            slots = {str(t): int(s) for t, s in conn.execute("SELECT team, slot FROM nmem.feeds")}
        columns = COLUMNS if slots is None else f"seq, {COLUMNS}"
        with cur.copy(f"COPY nmem.observations ({columns}) FROM STDIN") as copy:
            chunk: list[str] = []
            for i, line in enumerate(grower.rows(count, first, total, slots), 1):
                chunk.append(line)
                if len(chunk) == 2000:
                    copy.write("".join(chunk))
                    chunk = []
                if i % 1_000_000 == 0:
                    print(f"  stream {worker}: {i:,} rows in {time.monotonic() - t0:.0f} s", flush=True)
            if chunk:
                copy.write("".join(chunk))


def load(
    dsn: str, corpus: list[list[Record]], rows: int, state: dict[str, Any], save: Any, extra: list[tuple[str, str]]
) -> None:
    """COPY `rows` grown observations, triggers off, the secondary indexes dropped first (their
    definitions kept in `state`) and built afterwards with `extra` ones; resumes at the indexes
    when the rows are in."""
    teams = [TEAM, "globex", "initech"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        if state.get("copied") != rows:
            conn.execute("SET session_replication_role = replica")
            for team in teams:
                conn.execute("INSERT INTO nmem.teams (name) VALUES (%s) ON CONFLICT DO NOTHING", (team,))
            indexes = conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'nmem' AND tablename = 'observations'"
                " AND indexname NOT LIKE '%%pkey'"
            ).fetchall()
            state["index_defs"] = [[name, definition] for name, definition in indexes]
            # A statement trigger with a transition table (M002's tombstone check) has every row of a
            # COPY kept in a tuplestore even with triggers off (it spills to pgsql_tmp: ~2 GB a
            # million rows): dropped for the load and created again after, as it was.
            state.setdefault(
                "trigger_defs",
                [
                    str(d)
                    for (d,) in conn.execute(
                        "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'nmem.observations'::regclass"
                        " AND NOT tgisinternal AND (tgnewtable IS NOT NULL OR tgoldtable IS NOT NULL)"
                    )
                ],
            )
            save()
            for definition in state["trigger_defs"]:
                name = re.match(r"CREATE (?:CONSTRAINT )?TRIGGER (\w+)", definition)
                assert name is not None
                conn.execute(f"DROP TRIGGER IF EXISTS {name.group(1)} ON nmem.observations")
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
            parts = [(w, w * rows // WORKERS, (w + 1) * rows // WORKERS - w * rows // WORKERS) for w in range(WORKERS)]
            with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
                pool.starmap(_copy_part, [(dsn, corpus, w, first, count, rows) for w, first, count in parts])
            print(f"COPY {rows:,} rows: {time.monotonic() - t0:.0f} s", flush=True)
            state["copied"] = rows
            save()
        for definition in state.get("trigger_defs", []):
            name = re.match(r"CREATE (?:CONSTRAINT )?TRIGGER (\w+)", definition)
            assert name is not None
            if not conn.execute(
                "SELECT 1 FROM pg_trigger WHERE tgname = %s AND tgrelid = 'nmem.observations'::regclass",
                (name.group(1),),
            ).fetchone():
                conn.execute(definition)
        conn.execute("SELECT setval('nmem.feed_seq', (SELECT max(seq) FROM nmem.observations))")
        if conn.execute("SELECT to_regclass('nmem.feeds')").fetchone() != (None,):  # v2: each team's feed
            conn.execute("SELECT setval(f.seq, (%s::bigint + 1) * 65536 + f.slot) FROM nmem.feeds f", (rows,))
    build_indexes(dsn, [(n, d) for n, d in state["index_defs"]] + extra)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, _ in state["index_defs"]:  # the unique constraint, on the index just built
            if (
                name.endswith("_key")
                and not conn.execute("SELECT 1 FROM pg_constraint WHERE conname = %s", (name,)).fetchone()
            ):
                conn.execute(f'ALTER TABLE nmem.observations ADD CONSTRAINT "{name}" UNIQUE USING INDEX "{name}"')
        t1 = time.monotonic()
        conn.execute("VACUUM (ANALYZE) nmem.observations")
        print(f"VACUUM ANALYZE: {time.monotonic() - t1:.0f} s", flush=True)
        print_sizes(conn)


INDEX_SESSIONS = 4  # indexes built at once (each CREATE INDEX is one process in PostgreSQL 15)


def build_indexes(dsn: str, indexes: list[tuple[str, str]]) -> None:
    """CREATE the `indexes` missing, several at once, the largest (GIN) first; each one timed."""
    from concurrent.futures import ThreadPoolExecutor

    with psycopg.connect(dsn, autocommit=True) as conn:
        have = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'nmem'")}
        trgm = conn.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
            " WHERE e.extname = 'pg_trgm'"
        ).fetchone()
    todo = sorted(
        ((n, d) for n, d in indexes if n not in have), key=lambda nd: ("gin" not in nd[1].lower(), "tsv" not in nd[1])
    )

    def build(name: str, definition: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET maintenance_work_mem = '1GB'")
            conn.execute(f"SET search_path = {trgm[0] if trgm else 'nmem'}, pg_catalog")
            t0 = time.monotonic()
            conn.execute(
                re.sub(r"^CREATE (UNIQUE )?INDEX (IF NOT EXISTS )?", r"CREATE \1INDEX IF NOT EXISTS ", definition)
            )
            print(f"index {name}: {time.monotonic() - t0:.0f} s", flush=True)

    with ThreadPoolExecutor(INDEX_SESSIONS) as pool:
        for future in [pool.submit(build, n, d) for n, d in todo]:
            future.result()


def print_sizes(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute(
        "SELECT pg_size_pretty(pg_total_relation_size('nmem.observations')),"
        " pg_size_pretty(pg_relation_size('nmem.observations')), pg_size_pretty(pg_database_size(current_database()))"
    ).fetchone()
    assert row is not None
    print(f"observations with indexes {row[0]} (heap {row[1]}); database {row[2]}", flush=True)
    for name, size in conn.execute(
        "SELECT indexrelid::regclass::text, pg_size_pretty(pg_relation_size(indexrelid)) FROM pg_index"
        " WHERE indrelid = 'nmem.observations'::regclass ORDER BY 1"
    ):
        print(f"  {name}: {size}")
    for scope, count in conn.execute(
        "SELECT 'team ' || team, count(*) FROM nmem.observations GROUP BY team"
        " UNION ALL SELECT 'project ' || project, count(*) FROM nmem.observations WHERE project IN (%s, %s)"
        " GROUP BY project UNION ALL SELECT 'author ' || author, count(*) FROM nmem.observations"
        " WHERE team = %s AND author IN (%s, %s) GROUP BY author ORDER BY 1",
        (LARGE, SMALL, TEAM, RARE, RARE_IN_LARGE),
    ):
        print(f"  {scope}: {count:,} rows")


# --- the queries -----------------------------------------------------------------------------------

SCOPES = [
    ("team", None, None),
    ("large project", LARGE, None),
    ("small project", SMALL, None),
    ("rare author", None, RARE),
    ("rare author in large project", LARGE, RARE_IN_LARGE),
]
IDENT = re.compile(r"^[A-Za-z][a-z0-9]+(?:_[a-z0-9]+)+$|^[a-z]+(?:[A-Z][a-z0-9]+)+$")


def queries(corpus: list[list[Record]], seed: int = 41) -> list[tuple[str, str]]:
    """(kind, query) picked from the corpus by how many of its records hold them."""
    rnd = random.Random(seed)
    records = [r for s in corpus for r in s]
    n = len(records)
    words: Counter[str] = Counter()
    pairs: Counter[str] = Counter()
    idents: Counter[str] = Counter()
    names: Counter[str] = Counter()
    for r in records:
        text = f"{r.title} {r.body}"
        tokens = WORD.findall(text.lower())
        words.update(set(tokens))
        plain = [t.lower() for t in text.split() if t.isalpha() and len(t) > 2]
        pairs.update({f"{a} {b}" for a, b in itertools.pairwise(plain) if a != b})
        idents.update({t.strip(".,:;()'\"`") for t in text.split() if IDENT.match(t.strip(".,:;()'\"`"))})
        names.update({f.rsplit("/", 1)[-1] for f in r.files if "." in f.rsplit("/", 1)[-1]})

    def pick(counter: Counter[str], lo: float, hi: float, k: int) -> list[str]:
        found = sorted(w for w, c in counter.items() if lo * n <= c <= hi * n)
        return rnd.sample(found, min(k, len(found)))

    common = pick(words, 0.08, 0.4, 6)
    out = [("common word", w) for w in common[:2]]
    out += [("common pair", f"{a} {b}") for a, b in itertools.pairwise(common[2:5])]
    out += [("middling word", w) for w in pick(words, 0.004, 0.012, 3)]
    out += [("rare word", w) for w in pick(words, 0.0002, 0.0008, 3)]
    out += [("common and rare", f"{common[5]} {w}") for w in pick(words, 0.0003, 0.001, 1)]
    out += [("absent", "zyzzogeton"), ("absent", "kubernetes ingressannotation quux")]
    out += [("common phrase", f'"{p}"') for p in pick(pairs, 0.01, 0.05, 2)]
    out += [("middling phrase", f'"{p}"') for p in pick(pairs, 0.001, 0.004, 2)]
    out += [("rare phrase", f'"{p}"') for p in pick(pairs, 0.0002, 0.0006, 2)]
    out += [("identifier", t) for t in pick(idents, 0.001, 0.02, 2) + pick(idents, 0.0002, 0.0006, 1)]
    out += [("file name", t) for t in pick(names, 0.002, 0.02, 2) + pick(names, 0.0002, 0.0006, 1)]
    return out


# --- measuring -------------------------------------------------------------------------------------


async def measure(dsn: str, corpus: list[list[Record]], rounds: int, timeout_ms: int, warm: int = 1) -> dict[str, Any]:
    """Every query in every scope, `rounds` times in alternating orders (after `warm` rounds not counted)."""
    from nmemd.team import server_search

    print(f"measuring {server_search.__file__}", flush=True)
    asked = [(scope, project, author, kind, q) for scope, project, author in SCOPES for kind, q in queries(corpus)]
    times: dict[str, list[float]] = {}
    hits: dict[str, list[str]] = {}
    failed: list[str] = []
    rnd = random.Random(int(time.time()))
    cpu: dict[str, list[float]] = {}
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        backend = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
        stat = Path(f"/proc/{backend[0] if backend else 0}/stat")  # the server's process, when it runs here
        for r in range(rounds + warm):
            order = list(asked)
            rnd.shuffle(order)
            for scope, project, author, kind, q in order:
                key = f"{scope}|{kind}|{q}"
                c0 = _cpu_ms(stat)
                t0 = time.perf_counter()
                try:
                    found = await server_search.search_team(
                        conn, team=TEAM, project=project, query=q, limit=10, author=author, timeout_ms=timeout_ms
                    )
                    hits[key] = [h.event_id for h in found]
                except Exception as exc:  # a timeout counts at its full time, and is shown
                    if r >= warm:
                        failed.append(f"{key}: {exc}")
                took = (time.perf_counter() - t0) * 1000
                used = _cpu_ms(stat) - c0
                if r >= warm:  # the first rounds warm the caches
                    times.setdefault(key, []).append(took)
                    cpu.setdefault(key, []).append(used)
    return {"times": times, "hits": hits, "failed": failed, "cpu": cpu if _cpu_ms(stat) > 0 else {}}


def _cpu_ms(stat: Path) -> float:
    """CPU time the server's backend has used (user + system), in ms: what a search costs the
    server whatever the machine's load; 0 when the server runs elsewhere."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def report(label: str, result: dict[str, Any]) -> dict[str, tuple[float, float, float]]:
    times: dict[str, list[float]] = result["times"]
    cpu: dict[str, list[float]] = result.get("cpu", {})
    by_scope: dict[str, list[float]] = {}
    by_kind: dict[str, list[float]] = {}
    cpu_of: dict[str, list[float]] = {}
    for key, values in times.items():
        scope, kind, _ = key.split("|", 2)
        by_scope.setdefault(scope, []).extend(values)
        by_kind.setdefault(kind, []).extend(values)
        for name in (scope, kind, "ALL"):
            cpu_of.setdefault(name, []).extend(cpu.get(key, []))
    every = [v for values in times.values() for v in values]
    by_scope["ALL"] = every
    print(f"\n== {label}: {len(every)} searches")
    print(
        f"{'scope / kind':<30} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'>budget':>8} {'server CPU ms':>14}"
    )
    stats: dict[str, tuple[float, float, float]] = {}
    for name, values in [*by_scope.items(), *sorted(by_kind.items())]:
        over = sum(v > BUDGET_MS for v in values)
        stats[name] = (percentile(values, 50), percentile(values, 99), max(values))
        used = cpu_of.get(name, [])
        mean = f"{sum(used) / len(used):14.1f}" if used else f"{'-':>14}"
        print(
            f"{name:<30} {len(values):5} {stats[name][0]:8.1f} {stats[name][1]:8.1f} {stats[name][2]:8.1f} {over:8}"
            f" {mean}"
        )
        if name == "ALL":
            print()
    slow = sorted(((max(v), k) for k, v in times.items()), reverse=True)[:8]
    print("slowest: " + "; ".join(f"{k.replace('|', ' / ')} {t:.0f} ms" for t, k in slow))
    for line in result["failed"][:10]:
        print(f"FAILED {line}")
    print(
        f"{len(result['failed'])} failed; {sum(v > BUDGET_MS for v in every)} past the daemon's {BUDGET_MS} ms budget"
    )
    return stats


def same_hits(a: dict[str, list[str]], b: dict[str, list[str]]) -> str:
    keys = [k for k in a if k in b]
    same = sum(a[k] == b[k] for k in keys)
    overlap = [len(set(a[k]) & set(b[k])) / max(len(a[k]), len(b[k]), 1) for k in keys if a[k] or b[k]]
    mean = sum(overlap) / max(len(overlap), 1)
    return f"{same}/{len(keys)} searches with identical hits; mean overlap of the top 10 {mean:.0%}"


UNBOUNDED = """
SELECT o.event_id FROM nmem.observations o
WHERE o.team = %(team)s AND (%(project)s::text IS NULL OR o.project = %(project)s)
  AND (%(author)s::name IS NULL OR o.author = %(author)s)
  AND (o.tsv @@ websearch_to_tsquery('simple', %(query)s)
       OR (%(pattern)s::text IS NOT NULL AND (o.title ILIKE %(pattern)s OR nmem.files_text(o.files) ILIKE %(pattern)s)))
ORDER BY (ts_rank_cd(o.tsv, websearch_to_tsquery('simple', %(query)s), 1)
          + CASE WHEN %(pattern)s::text IS NULL THEN 0 WHEN o.title ILIKE %(pattern)s THEN 1.0
                 WHEN nmem.files_text(o.files) ILIKE %(pattern)s THEN 0.5 ELSE 0 END)::real DESC, o.seq DESC
LIMIT 10
"""


def quality(dsn: str, hits: dict[str, dict[str, list[str]]], timeout_s: int) -> None:
    """The share of each search's top 10 that the unbounded query (every match in the scope ranked,
    by the same rank) also puts in its top 10, per kind; searches whose unbounded query takes more
    than `timeout_s` are left out and counted."""
    from nmemd.team.server_search import like_pattern, substring_term, words_query

    scopes = {name: (project, author) for name, project, author in SCOPES}
    keys = sorted(set.intersection(*(set(h) for h in hits.values())))
    share: dict[str, dict[str, list[float]]] = {which: {} for which in hits}
    skipped: Counter[str] = Counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET statement_timeout = '{timeout_s}s'")
        conn.execute("SET jit = off")
        for key in keys:
            scope, kind, q = key.split("|", 2)
            project, author = scopes[scope]
            term = substring_term(q)
            args = {"team": TEAM, "project": project, "author": author, "query": words_query(q)}
            args["pattern"] = like_pattern(term) if term else None
            try:
                best = [str(r[0]) for r in conn.execute(UNBOUNDED, args)]
            except psycopg.errors.QueryCanceled:
                skipped[kind] += 1
                continue
            for which, found in hits.items():
                if best or found[key]:
                    got = len(set(best) & set(found[key])) / max(len(best), 1)
                    share[which].setdefault(kind, []).append(got)
                    share[which].setdefault("ALL", []).append(got)
    left = sum(skipped.values())
    print(f"\ntop 10 shared with the unbounded query (mean per search; {left} left out past {timeout_s} s)")
    kinds = sorted({k for v in share.values() for k in v})
    print(f"{'kind':<20} " + " ".join(f"{w:>10}" for w in share) + "  left out")
    for kind in kinds:
        cells = [share[w].get(kind, []) for w in share]
        print(f"{kind:<20} " + " ".join(f"{sum(c) / max(len(c), 1):10.0%}" for c in cells) + f"  {skipped[kind]}")


# --- the cluster -----------------------------------------------------------------------------------


class Server:
    """A cluster kept in `root` between runs (`--pgdata`) or a throwaway one; its facts in bench.json."""

    def __init__(self, root: Path | None, start: bool = True) -> None:
        bindir = pg_cluster.find_bindir()
        if bindir is None or pg_cluster.unavailable():
            raise SystemExit(pg_cluster.unavailable() or "no PostgreSQL")
        self.cluster = pg_cluster.Cluster(bindir, settings=SERVER_SETTINGS)
        self.kept = root is not None
        if root is not None:
            shutil.rmtree(self.cluster.root)
            root.mkdir(parents=True, exist_ok=True)
            root.chmod(0o700)
            if os.geteuid() == 0:
                ids = pwd.getpwnam(pg_cluster.SERVER_USER)
                os.chown(root, ids.pw_uid, ids.pw_gid)
            self.cluster.root = root
        self.state_file = self.cluster.root / "bench.json"
        self.state: dict[str, Any] = json.loads(self.state_file.read_text()) if self.state_file.exists() else {}
        if self.state:
            self.cluster.password = self.state["password"]
            self.cluster.port = self.state["port"]
        if start:
            self.cluster.start()
            self.state["password"], self.state["port"] = self.cluster.password, self.cluster.port
            self.save()

    def save(self) -> None:
        self.state_file.write_text(json.dumps(self.state, indent=1))

    def database(self) -> None:
        if "db" in self.state:
            return
        name = f"bench_{secrets.token_hex(4)}"
        admin, password = f"{name}_admin", secrets.token_urlsafe(18)
        self.cluster.execute(f"CREATE ROLE {admin} LOGIN CREATEROLE PASSWORD '{password}'")
        self.cluster.execute(f"CREATE DATABASE {name} OWNER {admin}")
        self.state.update(db=name, admin=admin, admin_password=password)
        self.save()

    @property
    def admin_dsn(self) -> str:
        return self.cluster.dsn(self.state["db"], self.state["admin"], self.state["admin_password"])

    @property
    def superuser_dsn(self) -> str:
        return self.cluster.dsn(self.state["db"])

    def close(self) -> None:
        if self.kept:
            self.cluster.stop("fast")
        else:
            self.cluster.destroy()


def python_of(tree: Path) -> str:
    venv = tree / ".venv" / "bin" / "python"
    return str(venv if venv.exists() else sys.executable)


def with_tree(tree: Path, code: str, *args: str) -> str:
    """Run `code` with `tree`'s nmemd (its own venv), returning its stdout's last line."""
    done = subprocess.run(
        [python_of(tree), "-c", code, *args], capture_output=True, text=True, cwd=tree, timeout=4 * 3600
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr.strip()[-2000:]}")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


INIT = """
import sys, time
from nmemd.team import admin
t0 = time.monotonic()
admin.init(sys.argv[1], sys.argv[2])
for team in ("globex", "initech"):
    admin.init(sys.argv[1], team)
print(round(time.monotonic() - t0, 1))
"""
MEMBER_CODE = """
import sys
from nmemd.team import admin
print(admin.add_member(sys.argv[1], sys.argv[2], sys.argv[3]).dsn)
"""

# --- the baseline and this tree on the same rows, in alternation -----------------------------------
#
# Rebuilding a full-text index of 10M rows takes the better part of an hour here, so with
# --baseline both schemas' indexes are built once: this tree's new ones are built at load time and
# hidden from the planner (pg_index.indisvalid) while the baseline is measured; the indexes its
# migrations drop are renamed (bench_base_*) before they run, and hidden while this tree is
# measured. The server is migrated for real (its other steps run, the index builds are skipped);
# each state is then the functions of its own code with only its own indexes visible.

NEW_INDEX = re.compile(r"CREATE INDEX (?:IF NOT EXISTS )?(\w+)\s+ON\s+nmem\.observations\b[^;]*", re.S)
DROPPED_INDEX = re.compile(r"DROP INDEX (?:IF EXISTS )?nmem\.(\w+)")
EXTENSION = re.compile(r"CREATE EXTENSION[^;]*", re.S)
REPLACED_FN = re.compile(r"CREATE (?:OR REPLACE )?FUNCTION nmem\.(\w+)\(")
INDEXED_FN = re.compile(r"nmem\.(\w+)\(")


def _functions(conn: psycopg.Connection[Any], names: list[str]) -> list[str]:
    rows = conn.execute(
        "SELECT pg_get_functiondef(p.oid) FROM pg_proc p WHERE p.pronamespace = 'nmem'::regnamespace"
        " AND p.proname = ANY(%s)",
        (names,),
    ).fetchall()
    return [str(r[0]) for r in rows]


def _show(conn: psycopg.Connection[Any], names: list[str], valid: bool) -> None:
    conn.execute(
        "UPDATE pg_index SET indisvalid = %s WHERE indexrelid = ANY(SELECT oid FROM pg_class"
        " WHERE relnamespace = 'nmem'::regnamespace AND relname = ANY(%s))",
        (valid, names),
    )


def has_ledger(conn: psycopg.Connection[Any]) -> bool:
    return conn.execute("SELECT to_regclass('nmem.migrations')").fetchone() != (None,)


def pending(server: Server) -> tuple[str, list[tuple[str, str]]]:
    """The SQL of this tree's migrations the server lacks (their extensions created) and the
    indexes they create."""
    from nmemd.team import schema

    with psycopg.connect(server.superuser_dsn, autocommit=True) as conn:
        found = schema.read_version(conn.execute(schema.version_sql(has_ledger(conn))).fetchone())
        version = found.version if found else 0
        sql = "\n".join(m.sql for m in schema.MIGRATIONS if m.version > version)
        server.state["base_version"] = version
        for statement in EXTENSION.findall(sql):
            conn.execute(statement)
    new = [(m.group(1), m.group(0)) for m in NEW_INDEX.finditer(sql)]
    with psycopg.connect(server.admin_dsn, autocommit=True) as conn:  # the schema's owner, as the migration
        for name in sorted({f for _, definition in new for f in INDEXED_FN.findall(definition)}):
            # a function of the rows that a new index holds: created first (the migration replaces it)
            found = re.search(rf"CREATE (?:OR REPLACE )?FUNCTION nmem\.{name}\(.*?\$f\$;", sql, re.S)
            if found:
                conn.execute(found.group(0).encode())
    return sql, new


def prepare_both(server: Server, here: Path) -> None:
    """Build this tree's pending indexes (hidden), keep the baseline's, migrate with this tree."""
    sql, new = pending(server)
    build_indexes(server.superuser_dsn, new)
    with psycopg.connect(server.superuser_dsn, autocommit=True) as conn:
        _show(conn, [n for n, _ in new], valid=False)
        kept = []
        for name in DROPPED_INDEX.findall(sql):
            if conn.execute("SELECT to_regclass(%s)", (f"nmem.{name}",)).fetchone() != (None,):
                conn.execute(f'ALTER INDEX nmem."{name}" RENAME TO "bench_base_{name}"')
                kept.append(f"bench_base_{name}")
        functions = sorted(set(REPLACED_FN.findall(sql)))
        server.state.update(new_indexes=[n for n, _ in new], base_indexes=kept, base_fns=_functions(conn, functions))
        server.save()
        _show(conn, [n for n, _ in new], valid=True)
    took = with_tree(here, INIT, server.admin_dsn, TEAM)
    print(f"\nmigrated the server with {here}'s code in {took} s (its index builds timed above)", flush=True)
    with psycopg.connect(server.superuser_dsn, autocommit=True) as conn:
        conn.execute("ANALYZE nmem.observations")
        server.state.update(mine_fns=_functions(conn, functions), schema_of=str(here))
        server.save()
        print_sizes(conn)


def refresh(server: Server) -> None:
    """Run this tree's newest migration again (idempotent): a changed function of it replaces the
    one measured, without rebuilding anything."""
    from nmemd.team import schema

    with psycopg.connect(server.superuser_dsn, autocommit=True) as conn:
        trgm = conn.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
            " WHERE e.extname = 'pg_trgm'"
        ).fetchone()
        conn.execute(f"SET search_path = {trgm[0] if trgm else 'nmem'}, pg_catalog")
        sql = schema.MIGRATIONS[-1].sql
        conn.execute(sql.encode())
        # the newest migration may replace fewer functions than this tree measured before (v14 replaces
        # name_tokens only): the others keep their definitions, or `use` would leave the baseline's
        replaced = set(REPLACED_FN.findall(sql))
        kept = [d for d in server.state.get("mine_fns", []) if set(REPLACED_FN.findall(d)[:1]).isdisjoint(replaced)]
        server.state["mine_fns"] = kept + _functions(conn, sorted(replaced))
        server.save()


def use(server: Server, which: str) -> None:
    """Make the server `base` or `mine`: that code's functions, only that code's indexes visible."""
    st = server.state
    with psycopg.connect(server.superuser_dsn, autocommit=True) as conn:
        for definition in st[f"{which}_fns"]:
            conn.execute(definition)
        _show(conn, st["new_indexes"], valid=which == "mine")
        _show(conn, st["base_indexes"], valid=which == "base")


def merge(into: dict[str, Any], part: dict[str, Any]) -> None:
    for key, values in part["times"].items():
        into.setdefault("times", {}).setdefault(key, []).extend(values)
    into.setdefault("hits", {}).update(part["hits"])
    into.setdefault("failed", []).extend(part["failed"])
    for key, values in part.get("cpu", {}).items():
        into.setdefault("cpu", {}).setdefault(key, []).extend(values)


def compare(base: dict[str, tuple[float, float, float]], mine: dict[str, tuple[float, float, float]]) -> None:
    print(f"\n{'scope / kind':<30} {'baseline p50 / p99 / max ms':>30} {'this tree p50 / p99 / max ms':>30}")
    for name, (p50, p99, top) in mine.items():
        b50, b99, btop = base.get(name, (float("nan"),) * 3)
        print(f"{name:<30} {b50:9.1f} {b99:9.1f} {btop:9.1f}  {p50:9.1f} {p99:9.1f} {top:9.1f}")


def measure_with(tree: Path, dsn: str, rounds: int, timeout_ms: int, warm: int = 1) -> dict[str, Any]:
    """This script's --measure in a child process running `tree`'s code."""
    with tempfile.NamedTemporaryFile(suffix=".json", dir="/tmp") as out:
        argv = [python_of(tree), __file__, "--measure", dsn, "--rounds", str(rounds), "--timeout-ms", str(timeout_ms)]
        argv += ["--warm", str(warm)]
        done = subprocess.run([*argv, "--json", out.name], cwd=tree, timeout=4 * 3600)
        if done.returncode != 0:
            raise SystemExit(f"measuring with {tree} failed")
        result: dict[str, Any] = json.loads(Path(out.name).read_text())
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument(
        "--rounds", type=int, default=4, help="passes over every query in every scope (0: build and migrate only)"
    )
    parser.add_argument("--timeout-ms", type=int, default=2000, help="the budget handed to search_team")
    parser.add_argument("--pgdata", type=Path, help="keep the cluster in this folder (reused when it holds the rows)")
    parser.add_argument("--baseline", type=Path, help="a worktree of the commit to compare with (its own .venv)")
    parser.add_argument("--stop", action="store_true", help="stop the cluster kept in --pgdata and exit")
    parser.add_argument("--refresh", action="store_true", help="replace this tree's functions on a kept server first")
    parser.add_argument("--baseline-only", action="store_true", help="build (or reuse) and measure the baseline only")
    parser.add_argument(
        "--quality", type=int, metavar="S", help="compare each top 10 with the unbounded query's (at most S s each)"
    )
    parser.add_argument("--measure", metavar="MEMBER_DSN", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--warm", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:  # a child of measure_with: this process runs that tree's code
        sys.path.insert(0, os.getcwd())
        result = asyncio.run(measure(args.measure, sessions(), args.rounds, args.timeout_ms, args.warm))
        args.json.write_text(json.dumps(result))
        return
    if args.stop:
        Server(args.pgdata, start=False).close()
        return
    print_machine()
    here = Path(__file__).resolve().parents[1]
    corpus = sessions()
    started = time.monotonic()
    server = Server(args.pgdata)
    try:
        print(f"cluster in {server.cluster.root} (PostgreSQL from {server.cluster.bindir})", flush=True)
        server.database()
        first = args.baseline or here
        if server.state.get("rows") != args.rows:
            if "member_dsn" not in server.state:
                with_tree(first, INIT, server.admin_dsn, TEAM)
                server.state["member_dsn"] = with_tree(first, MEMBER_CODE, server.admin_dsn, TEAM, MEMBER)
                server.state["schema_of"] = str(first)
                server.save()
            extra = pending(server)[1] if args.baseline and server.state["schema_of"] == str(args.baseline) else []
            load(server.superuser_dsn, corpus, args.rows, server.state, server.save, extra)
            server.state["rows"] = args.rows
            server.save()
            print(f"built in {time.monotonic() - started:.0f} s", flush=True)
        else:
            print(f"reusing {args.rows:,} rows; schema of {server.state.get('schema_of')}", flush=True)
        dsn = server.state["member_dsn"]
        if not args.baseline:
            if server.state.get("schema_of") != str(here):
                took = with_tree(here, INIT, server.admin_dsn, TEAM)
                print(f"migrated the server with {here}'s code in {took} s", flush=True)
                server.state["schema_of"] = str(here)
                server.save()
            report(f"this tree {here}", measure_with(here, dsn, args.rounds, args.timeout_ms))
            return
        if args.baseline_only:
            use(server, "base") if "base_fns" in server.state else None
            report(f"baseline {args.baseline}", measure_with(args.baseline, dsn, args.rounds, args.timeout_ms))
            return
        if "base_fns" not in server.state:
            prepare_both(server, here)
        elif args.refresh:
            refresh(server)
        if args.rounds == 0:  # built and migrated only: the measuring run comes on its own
            return
        results: dict[str, dict[str, Any]] = {"base": {}, "mine": {}}
        trees = {"base": args.baseline, "mine": here}
        for r in range(args.rounds):  # alternating: base mine, mine base, ...
            for which in ("base", "mine") if r % 2 == 0 else ("mine", "base"):
                use(server, which)
                print(f"round {r + 1}: {which}", flush=True)
                merge(results[which], measure_with(trees[which], dsn, 1, args.timeout_ms))
        base = report(f"baseline {args.baseline}", results["base"])
        mine = report(f"this tree {here}", results["mine"])
        compare(base, mine)
        print(
            "\nthe same searches, baseline vs this tree: " + same_hits(results["base"]["hits"], results["mine"]["hits"])
        )
        use(server, "mine")
        if args.quality:
            quality(server.superuser_dsn, {w: results[w]["hits"] for w in ("base", "mine")}, args.quality)
    finally:
        server.close()


if __name__ == "__main__":
    main()
