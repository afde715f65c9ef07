"""Scale: search, SessionStart, size and ingest on a 1,000,000-observation store (issue #14).

The store is generated from the real transcripts of the shared corpus: they are imported
once into a seed store (`nmem import-transcripts`) and exported (`nmem export`), then the
seed's observations are remixed into `--observations` rows over 50 projects of Zipf-like
sizes (the largest ~15 %), sessions of tens to hundreds of rows (a lifecycle row at start
and end, a stop row per turn, as live hooks store them) and timestamps over 12 months.
Numbers, identifiers (snake_case, camelCase) and project roots are substituted per session
or project, so the text is not the seed ten times over but keeps its word distribution. The
rows go in through the daemon's `import` RPC (what `nmem import` sends, in its largest
chunks); each session's summary is then computed by nmem's own `summarize_session` and
stored as the daemon does at Stop. The built store is cached under `--store` (keyed by
size), never analysed: every phase runs on a scratch copy.

Phases, each on a fresh copy of the cached store with its own daemon:

1. search: >= 200 queries through the daemon's RPC (in-process, `nmemd.control.control`):
   words in ~30 % down to ~0.03 % of rows, real prompts as questions, identifiers, paths,
   two-letter prefixes, each with and without `--project` (the largest project);
2. SessionStart: the real hook client (`python -I -S nmem_client/send.py`) with a
   SessionStart payload whose cwd is the largest project, on the store fresh from the
   generator (no ANALYZE has ever run), and again after `nmem maintain` (all jobs but the
   retention sweep, `--retention` for all; searches again too). Each run starts on an idle
   daemon: a client that timed out has left, but the daemon still computes its context;
3. bytes per observation: database file + WAL (checkpointed) / observations;
   then the `context` RPC as the SessionStart hook has the daemon build it (p50/p99, and which
   sections the context holds: the latest session's handoff, failures, commands, decisions, earlier
   sessions, tasks, files) and the `status` RPC (`nmem status`'s counts);
4. ingest: bench_ingest's load generator, 32 connections, unique events, on a copy of
   the store vs an empty store, alternating.

`--tree DIR` runs the daemon, the CLI and the hook client of another checkout (with its own .venv)
on the same cached store: a baseline of the same run, each tree in turn.

    .venv/bin/python bench/bench_scale.py                         # 1,000,000 rows, cached in /tmp
    .venv/bin/python bench/bench_scale.py --observations 100000   # while developing
    .venv/bin/python bench/bench_scale.py --store DIR --rebuild --json
    .venv/bin/python bench/bench_scale.py --store DIR --skip maintain --skip ingest --tree ../base   # baseline
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import hashlib
import json
import math
import os
import queue
import random
import re
import shutil
import sqlite3
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bench_ingest
import common
import msgspec
from common import Daemon, Home, median, percentile

from nmemd.control import control
from nmemd.history import transfer
from nmemd.history.transfer import ObservationRecord, SessionRecord

NMEM = str(common.VENV_BIN / "nmem")
CORPUS_UNPACK = Path("/work/shared/corpus/unpack.sh")
DEFAULT_STORE = "/tmp/nmem-scale"
PROJECTS = 50
LARGEST_SHARE = 0.15
DAYS = 365
IMPORT_CHUNK = 4 * transfer.CHUNK  # the most records one `import` RPC accepts
IMPORT_TIMEOUT_S = 300.0
RPC_TIMEOUT_S = 60.0
MAINTAIN_TIMEOUT_S = 3600.0
READY_TIMEOUT_S = 300.0
MERGE_WAIT_S = 1800.0  # the daemon's own FTS merge after the build's import (a million rows: ~1-2 min)
FORMAT = 2  # of the cache: a different generator builds a different store

TARGETS = {
    "search_p50_ms": 6.0,
    "search_p99_ms": 25.0,
    "sessionstart_p50_ms": 30.0,
    "sessionstart_p99_ms": 100.0,
    "sessionstart_delivered": 1.0,
    "context_rpc_p50_ms": 8.0,
    "status_rpc_p50_ms": 50.0,
    "bytes_per_observation": 1500.0,
    "ingest_ratio": 0.95,
}


# --- the seed: real observations ---------------------------------------------------------------


def seed_export(store_dir: Path) -> Path:
    """`nmem export` of the corpus imported by `nmem import-transcripts` (cached)."""
    out = store_dir / "seed.jsonl"
    if out.exists():
        return out
    corpus = store_dir / "corpus"
    projects = subprocess.run([str(CORPUS_UNPACK), str(corpus)], capture_output=True, text=True, check=True,
                              timeout=300).stdout.strip()  # fmt: skip
    with Home() as home:
        daemon = Daemon(home)
        daemon.start()
        try:
            run = subprocess.run([NMEM, "import-transcripts", projects, "--json"], env=home.env(), capture_output=True,
                                 text=True, timeout=600, check=True)  # fmt: skip
            print(f"seed: import-transcripts {run.stdout.strip()}")
            with open(out.with_suffix(".tmp"), "wb") as fh:
                subprocess.run([NMEM, "export"], env=home.env(), stdout=fh, timeout=600, check=True)
        finally:
            daemon.stop()
    out.with_suffix(".tmp").rename(out)
    shutil.rmtree(corpus, ignore_errors=True)
    return out


@dataclass
class Seed:
    sessions: list[list[ObservationRecord]]  # each seed session's rows, in order
    projects: dict[str, str]  # seed session id -> its project root
    lifecycle: dict[str, ObservationRecord] = field(default_factory=dict)  # start, end, stop rows


def lifecycle_rows() -> dict[str, ObservationRecord]:
    """What nmem's extraction stores for SessionStart, Stop and SessionEnd (from the fixture's payloads)."""
    from nmemd.capture.extract import extract_event

    out: dict[str, ObservationRecord] = {}
    names = {"SessionStart": "start", "Stop": "stop", "SessionEnd": "end"}
    with common.FIXTURE.open("rb") as fh:
        for line in fh:
            event = json.loads(line) if line.strip() else {}
            name = names.get(event.get("hook_event_name", ""))
            if name is None or name in out:
                continue
            obs = extract_event(line, frozenset()).observations[0]
            out[name] = ObservationRecord(event_id="-", session_id="-", ts=0.0, hook_event=event["hook_event_name"],
                                          type=obs.type, title=obs.title, content=obs.content or "")  # fmt: skip
    return out


def load_seed(path: Path) -> Seed:
    with path.open("rb") as fh:
        parsed = transfer.parse_lines(iter(fh))
    by_session: dict[str, list[ObservationRecord]] = {}
    projects: dict[str, str] = {}
    for r in parsed.records:
        if isinstance(r, SessionRecord):
            projects[r.session_id] = r.project or r.cwd or ""
        else:
            by_session.setdefault(r.session_id, []).append(r)
    sessions = [rows for rows in by_session.values() if any(o.type == "prompt" for o in rows)]
    for rows in sessions:
        projects.setdefault(rows[0].session_id, rows[0].project or "")
    return Seed(sessions, projects, lifecycle_rows())


# --- the generator -----------------------------------------------------------------------------


def zipf_sizes(total: int, n: int, largest_share: float) -> list[int]:
    """n sizes summing to total, size_k ~ 1/k^s with s chosen so the largest holds `largest_share`."""
    lo, hi = 0.0, 3.0
    for _ in range(60):
        s = (lo + hi) / 2
        share = 1.0 / sum(k**-s for k in range(1, n + 1))
        lo, hi = (s, hi) if share < largest_share else (lo, s)
    weights = [k**-s for k in range(1, n + 1)]
    sizes = [max(1, int(total * w / sum(weights))) for w in weights]
    sizes[0] += total - sum(sizes)
    return sizes


_TOKEN = re.compile(r"\b(\d{2,6})\b|\b([A-Za-z][a-z0-9]*(?:_[A-Za-z0-9]+)+|[a-z]+[A-Z][A-Za-z0-9]*)\b")
_SUFFIXES = ("V2", "Impl", "Handler", "Async", "Cache", "Util", "New", "Base")


class Variant:
    """Rewrites one seed row's text for a generated session of a project.

    Digit runs are shifted by a per-session offset (line numbers, sizes, ports, ids differ);
    identifiers get a per-project variant for about a third of them (projects name things
    differently) while plain words stay as they are: the word distribution stays real.
    """

    def __init__(self, project: str, idents: dict[str, str], rng: random.Random) -> None:
        self.project = project
        self.idents = idents
        self.offset = rng.randrange(1, 997)

    def _sub(self, m: re.Match[str]) -> str:
        digits = m.group(1)
        if digits is not None:
            return str((int(digits) + self.offset) % 10 ** len(digits)).zfill(len(digits) if digits[0] == "0" else 1)
        ident = m.group(2)
        out = self.idents.get(ident)
        if out is None:
            h = int.from_bytes(hashlib.blake2b(f"{self.project}\0{ident}".encode(), digest_size=4).digest(), "big")
            if h % 3:
                out = ident
            else:
                suffix = _SUFFIXES[(h >> 2) % len(_SUFFIXES)]
                out = ident + ("_" + suffix.lower() if "_" in ident else suffix)
            self.idents[ident] = out
        return out

    def text(self, value: str | None, seed_root: str) -> str | None:
        if not value:
            return value
        rooted = bool(seed_root) and seed_root in value
        if rooted:  # the project root is replaced whole, never varied
            value = value.replace(seed_root, "\x00")
        value = _TOKEN.sub(self._sub, value)
        return value.replace("\x00", self.project) if rooted else value


def _event_id(ts: float, rng: random.Random) -> str:
    return f"{int(ts * 1000):012x}{rng.getrandbits(80):020x}"


@dataclass
class Plan:
    project: str
    start: float
    length: int


def project_roots(seed: Seed, n: int) -> list[str]:
    """n project roots named after the seed's projects (real names, paths that exist nowhere here)."""
    names: list[str] = []
    for root in dict.fromkeys(seed.projects.values()):
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", root.rstrip("/").rsplit("/", 1)[-1]) or "project"
        names.append(name)
    out: list[str] = []
    k = 0
    while len(out) < n:
        name = names[k % len(names)] + (f"-{k // len(names) + 1}" if k >= len(names) else "")
        root = f"/home/dev/src/{name}"
        if root not in out:
            out.append(root)
        k += 1
    return out


def plan_sessions(total: int, roots: list[str], now: float, rng: random.Random) -> list[Plan]:
    """Sessions per project (lengths log-normal, median ~60 rows), started over DAYS, oldest first."""
    plans: list[Plan] = []
    for root, size in zip(roots, zipf_sizes(total, len(roots), LARGEST_SHARE), strict=True):
        left = size
        while left > 0:
            length = min(left, max(10, min(600, int(rng.lognormvariate(math.log(60), 0.9)))))
            if 0 < left - length < 10:  # no tiny tail session
                length = left
            plans.append(Plan(root, now - rng.uniform(3600.0, DAYS * 86400.0), length))
            left -= length
    plans.sort(key=lambda p: p.start)
    return plans


class _Session:
    """The rows of one generated session, appended in time order."""

    def __init__(self, plan: Plan, variant: Variant, rng: random.Random) -> None:
        self.sid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        self.plan, self.variant, self.rng = plan, variant, rng
        self.rows: list[ObservationRecord] = []
        self.ts = plan.start
        self.prompts = 0

    def add(self, o: ObservationRecord, seed_root: str, gap: float) -> None:
        self.ts += gap
        if o.type == "prompt":
            self.prompts += 1
        text, rng = self.variant.text, self.rng
        self.rows.append(
            msgspec.structs.replace(
                o, event_id=_event_id(self.ts, rng), session_id=self.sid, project=self.plan.project, ts=self.ts,
                last_ts=self.ts + min(max((o.last_ts or o.ts) - o.ts, 0.0), 3600.0),
                title=text(o.title, seed_root) or "-", content=text(o.content, seed_root) or "",
                file_path=text(o.file_path, seed_root), command=text(o.command, seed_root),
                tool_use_id=f"toolu_{rng.getrandbits(96):024x}" if o.tool_use_id else None,
                prompt_number=self.prompts if o.type == "prompt" else None,
            )
        )  # fmt: skip


class Summarizer:
    """A session's summary by nmem's own `summarize_session`, as the daemon stores it after Stop.

    Every query of the summary is about the one session, so it runs on a scratch in-memory
    database with nmem's schema holding only that session's rows: the same text, without
    the cost of the store's size (on an unanalysed store `_errors` scans every error row).
    """

    def __init__(self) -> None:
        from nmemd.recall.handoff import summarize_session
        from nmemd.store.migrations import MIGRATIONS

        self.summarize = summarize_session
        self.conn = sqlite3.connect(":memory:")
        for _, ddl in MIGRATIONS:
            self.conn.executescript(ddl)

    def __call__(self, s: _Session) -> str | None:
        c = self.conn
        c.execute("DELETE FROM observations")
        c.execute("DELETE FROM prompts")
        c.execute("DELETE FROM sessions")
        c.execute("INSERT INTO sessions(session_id, project) VALUES (?, ?)", (s.sid, s.plan.project))
        c.executemany(
            "INSERT INTO observations(id, event_id, session_id, project, ts, last_ts, count, hook_event, type, title,"
            " content, tool_name, file_path, command, tool_use_id, agent_id) VALUES"
            " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(n, o.event_id, o.session_id, o.project, o.ts, o.last_ts, o.count, o.hook_event, o.type, o.title,
              o.content, o.tool_name, o.file_path, o.command, o.tool_use_id, o.agent_id)
             for n, o in enumerate(s.rows, 1)],
        )  # fmt: skip
        c.executemany(
            "INSERT INTO prompts(observation_id, session_id, prompt_number, ts) VALUES (?, ?, ?, ?)",
            [(n, o.session_id, o.prompt_number, o.ts) for n, o in enumerate(s.rows, 1) if o.type == "prompt"],
        )
        return self.summarize(c, s.sid) or None


def generate(seed: Seed, plans: list[Plan], rng: random.Random) -> Iterator[SessionRecord | ObservationRecord]:
    """The records of every planned session, oldest session first (ids grow with time, as live)."""
    starts = [[i for i, o in enumerate(rows) if o.type == "prompt"] for rows in seed.sessions]
    cumulative: list[int] = []
    for rows in seed.sessions:  # seed sessions drawn by their size
        cumulative.append((cumulative[-1] if cumulative else 0) + len(rows))
    idents: dict[str, dict[str, str]] = {}
    reasons = ("clear", "logout", "prompt_input_exit", "other")
    life = seed.lifecycle
    summarize = Summarizer()
    for plan in plans:
        s = _Session(plan, Variant(plan.project, idents.setdefault(plan.project, {}), rng), rng)
        ended = rng.random() < 0.85
        s.add(life["start"], "", 0.0)
        body = plan.length - 1 - (1 if ended else 0)
        while body > 0:  # consecutive rows of a seed session from one of its prompts; then another session
            k = bisect.bisect_left(cumulative, rng.uniform(0, cumulative[-1]))
            seed_rows = seed.sessions[k]
            i = rng.choice(starts[k])
            seed_root = seed.projects.get(seed_rows[0].session_id, "")
            while body > 0 and i < len(seed_rows):
                o = seed_rows[i]
                prev = seed_rows[i - 1].ts if i > 0 else o.ts
                if o.type == "prompt" and s.rows[-1].type != "session" and body > 1:
                    s.add(life["stop"], "", rng.uniform(2.0, 30.0))  # the turn before ended
                    body -= 1
                s.add(o, seed_root, min(max(o.ts - prev, 1.0), 900.0))
                body -= 1
                i += 1
        reason = rng.choice(reasons)
        if ended:
            s.add(msgspec.structs.replace(life["end"], title=f"Session ended ({reason})"), "", rng.uniform(5.0, 120.0))
        yield SessionRecord(session_id=s.sid, project=plan.project, cwd=plan.project, started_at=plan.start,
                            ended_at=s.ts if ended else None, last_event_at=s.ts, source="startup",
                            end_reason=reason if ended else None, event_count=len(s.rows),
                            summary=summarize(s))  # fmt: skip
        yield from s.rows


# --- building the store ------------------------------------------------------------------------


def _import_all(records: Iterator[SessionRecord | ObservationRecord], total: int) -> int:
    """Send the records in `import` RPCs; generation (a thread) overlaps the daemon's commits."""
    chunks: queue.Queue[list[dict[str, Any]] | None] = queue.Queue(maxsize=4)
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            chunk: list[dict[str, Any]] = []
            for r in records:
                chunk.append(msgspec.to_builtins(r))
                if len(chunk) >= IMPORT_CHUNK:
                    chunks.put(chunk, timeout=IMPORT_TIMEOUT_S)
                    chunk = []
            if chunk:
                chunks.put(chunk, timeout=IMPORT_TIMEOUT_S)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            failure.append(exc)
        finally:
            chunks.put(None, timeout=IMPORT_TIMEOUT_S)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    stored, started, shown = 0, time.perf_counter(), 0.0
    while (chunk := chunks.get(timeout=IMPORT_TIMEOUT_S)) is not None:
        reply = control.ask("import", {"records": chunk}, timeout=IMPORT_TIMEOUT_S)
        stored += int(reply["observations"])
        if time.perf_counter() - shown > 15:
            shown = time.perf_counter()
            rate = stored / (shown - started)
            print(f"  build: {stored:,} / {total:,} observations, {rate:,.0f}/s", flush=True)
    thread.join(IMPORT_TIMEOUT_S)
    if failure:
        raise failure[0]
    return stored


def _daemons_merge(db: str, imported_at: float) -> dict[str, Any]:
    """Wait (bounded) for the FTS merge the daemon runs by itself at its first quiet moment after a bulk
    write (nmemd.jobs.scheduler, MERGE_AFTER_ROWS): the store as a user's daemon leaves an import."""
    deadline = time.monotonic() + MERGE_WAIT_S
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30.0)
    try:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT last_run, outcome FROM jobs WHERE name = 'fts_merge'").fetchone()
            if row is not None and row[0] is not None and float(row[0]) >= imported_at:
                print(f"build: the daemon's merge after the import, {float(row[0]) - imported_at:.0f} s: {row[1]}")
                return {"seconds": round(float(row[0]) - imported_at, 1), "outcome": row[1]}
            time.sleep(0.5)
    finally:
        conn.close()
    print(f"build: warning: no FTS merge by the daemon within {MERGE_WAIT_S:.0f} s of the import's end")
    return {}


def checkpoint(db: str) -> None:
    conn = sqlite3.connect(db, timeout=30.0)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def build(store_dir: Path, count: int) -> dict[str, Any]:
    seed = load_seed(seed_export(store_dir))
    rng = random.Random(14)
    now = time.time()
    roots = project_roots(seed, PROJECTS)
    plans = plan_sessions(count, roots, now, rng)
    target = store_dir / f"obs-{count}"
    shutil.rmtree(target, ignore_errors=True)
    print(f"build: {count:,} observations in {len(plans):,} sessions over {len(roots)} projects"
          f" (largest {sum(p.length for p in plans if p.project == roots[0]):,}) from"
          f" {sum(len(s) for s in seed.sessions):,} seed rows")  # fmt: skip
    started = time.perf_counter()
    with Home() as home:
        daemon = Daemon(home)
        daemon.start()
        os.environ.update(NMEM_SOCKET=home.socket, NMEM_HOME=home.home)  # the client asks this store's daemon
        try:
            stored = _import_all(generate(seed, plans, rng), count)
            imported_s = time.perf_counter() - started
            merge = _daemons_merge(home.db, imported_at=time.time())
        finally:
            daemon.stop()
        checkpoint(home.db)
        target.mkdir(parents=True)
        shutil.move(home.db, target / "nmem.db")
    seconds = time.perf_counter() - started
    meta = {"format": FORMAT, "nmem_commit": nmem_commit(), "observations": stored, "sessions": len(plans),
            "projects": roots, "largest": roots[0], "built_at": now, "build_seconds": round(seconds, 1),
            "import_seconds": round(imported_s, 1), "merged_by_daemon": merge,
            "queries": pick_queries(seed, roots, rng)}  # fmt: skip
    (target / "meta.json").write_text(json.dumps(meta, indent=1))
    print(f"build: {stored:,} observations in {seconds:.0f} s (import {imported_s:.0f} s), {target}")
    return meta


def nmem_commit() -> str:
    """The commit of the code that built the store (stores built by other code differ in what they hold)."""
    run = subprocess.run(["git", "-C", str(common.REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, timeout=10, check=False)  # fmt: skip
    return run.stdout.strip() or "unknown"


def cached(store_dir: Path, count: int, rebuild: bool) -> tuple[Path, dict[str, Any]]:
    target = store_dir / f"obs-{count}"
    meta_path = target / "meta.json"
    if not rebuild and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("format") == FORMAT:
            print(f"store: cached {target} ({meta['observations']:,} observations, built in"
                  f" {meta['build_seconds']:.0f} s by nmem {meta.get('nmem_commit', 'unknown')}; --rebuild to"
                  " build it with this code)")  # fmt: skip
            if "merged_by_daemon" not in meta:
                print("store: built before the daemon merged its FTS index after an import: searches and ingest"
                      " meet the index in the segments the import left, which today's daemon merges at its"
                      " first quiet moment")  # fmt: skip
            return target / "nmem.db", meta
    store_dir.mkdir(parents=True, exist_ok=True)
    if rebuild:  # the seed too: what extraction keeps of the transcripts changes with nmem
        (store_dir / "seed.jsonl").unlink(missing_ok=True)
    meta = build(store_dir, count)
    return target / "nmem.db", meta


# --- queries -----------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z][a-z]{2,}")
_IDENT = re.compile(r"\b(?:[a-z]+_[a-z0-9_]+|[a-z]+[A-Z][A-Za-z0-9]+)\b")
BANDS = (0.30, 0.10, 0.03, 0.01, 0.003, 0.001, 0.0003)
PREFIXES = ("co", "re", "st", "in", "de", "pa", "fi", "te", "up", "ma")


def pick_queries(seed: Seed, roots: list[str], rng: random.Random) -> list[dict[str, str]]:
    """Queries from the seed's own text: words by document frequency, prompts, identifiers, paths."""
    rows = [o for s in seed.sessions for o in s]
    df: Counter[str] = Counter()
    idents: Counter[str] = Counter()
    paths: Counter[str] = Counter()
    for o in rows:
        text = " ".join(x for x in (o.title, o.content, o.file_path, o.command) if x)
        df.update(set(_WORD.findall(text.lower())))
        idents.update(set(_IDENT.findall(text)))
        if o.file_path and "/" in o.file_path:
            paths["/".join(o.file_path.rsplit("/", 2)[-2:])] += 1
    n = len(rows)
    out: list[dict[str, str]] = []
    for band in BANDS:  # 6 words nearest to each share of rows
        near = sorted(df, key=lambda w: (abs(math.log(df[w] / n / band)), w))[:6]
        out += [{"kind": f"word ~{band:.2%}", "query": w} for w in near]
    prompts = [o.title for o in rows if o.type == "prompt" and 20 <= len(o.title) <= 300]
    for title in rng.sample(prompts, min(40, len(prompts))):
        words = title.split()[: rng.randint(4, 9)]
        out.append({"kind": "question", "query": " ".join(words)})
    common_idents = [w for w, c in idents.most_common() if c >= 2]
    out += [{"kind": "identifier", "query": w} for w in rng.sample(common_idents, min(25, len(common_idents)))]
    common_paths = [p for p, c in paths.most_common(200)]
    out += [{"kind": "path", "query": p} for p in rng.sample(common_paths, min(25, len(common_paths)))]
    out += [{"kind": "prefix", "query": f"{p}*"} for p in PREFIXES]
    return out


# --- phases ------------------------------------------------------------------------------------


def copy_store(source: Path | str, target: str) -> None:
    """Copy a store as its daemon would have left it: written a page at a time and on disk.

    `shutil.copyfile` (sendfile) leaves the copy in the page cache in large folios: each checkpoint's
    4 KB page writes then sent whole folios to the disk at its fsync (271 against 45 KB a 16-event batch
    at a million observations, bench_writer_batch.py). And unsynced, the daemon's first checkpoint
    wrote the whole 1.2 GB copy back, charged to its checkpointer thread (issue #40).
    """
    with open(source, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst, 4096)
        dst.flush()
        os.fsync(dst.fileno())


class Scratch:
    """A daemon on a fresh copy of the cached store (removed afterwards): the cache is never analysed."""

    def __init__(self, db: Path | None, env: dict[str, str] | None = None) -> None:
        self.source = db
        self.home = Home()
        self.daemon = Daemon(self.home, env=env)

    def __enter__(self) -> Scratch:
        try:
            if self.source is not None:
                copy_store(self.source, self.home.db)
            self.daemon.start(READY_TIMEOUT_S)
            os.environ.update(NMEM_SOCKET=self.home.socket, NMEM_HOME=self.home.home)
        except BaseException:
            self.home.cleanup()
            raise
        return self

    def analysed(self) -> bool:
        conn = sqlite3.connect(f"file:{self.home.db}?mode=ro", uri=True, timeout=10.0)
        try:
            return bool(conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone()[0])
        finally:
            conn.close()

    def __exit__(self, *exc: object) -> None:
        try:
            self.daemon.stop()
        finally:
            self.home.cleanup()


def analysed(phase: dict[str, Any]) -> str:
    """Whether sqlite_stat1 existed after a fresh phase: the daemon may analyse a store itself."""
    return "present (written by the daemon)" if phase.get("analysed") else "none"


NO_OPTIMIZE = {"NMEM_MAINTENANCE_OPTIMIZE_INTERVAL_S": "0"}


def stats(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": median(values), "p95": percentile(values, 95), "p99": percentile(values, 99),
            "max": max(values)}  # fmt: skip


def daemon_cpu_s(pid: int | None) -> float:
    """The daemon's own CPU so far (utime + stime, Linux): per call, what a busy machine's waits leave out."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_searches(queries: list[dict[str, str]], project: str, rounds: int, pid: int | None = None) -> dict[str, Any]:
    """Each query with and without the project, `rounds` times in a shuffled order; RPC round trip in ms."""
    runs = [(q, p) for q in queries for p in (None, project)]
    times: dict[tuple[str, str | None], list[float]] = {}
    hits: dict[tuple[str, str | None], int] = {}
    rng = random.Random(7)
    cpu = daemon_cpu_s(pid)
    for _ in range(rounds):
        rng.shuffle(runs)
        for q, p in runs:
            params: dict[str, Any] = {"query": q["query"], "limit": 20}
            if p is not None:
                params["project"] = p
            start = time.perf_counter_ns()
            reply = control.ask("search", params, timeout=RPC_TIMEOUT_S)
            times.setdefault((q["query"], p), []).append((time.perf_counter_ns() - start) / 1e6)
            hits[(q["query"], p)] = len(reply)
    every = [t for ts in times.values() for t in ts]
    cpu_ms = (daemon_cpu_s(pid) - cpu) / len(every) * 1000
    kinds: dict[str, list[float]] = {}
    for q in queries:
        for p in (None, project):
            kinds.setdefault(q["kind"].split(" ")[0] + ("+project" if p else ""), []).extend(times[(q["query"], p)])
    slowest = sorted(times, key=lambda k: -median(times[k]))[:8]
    return {"queries": len(runs), "rounds": rounds, **stats(every), "daemon_cpu_ms": cpu_ms,
            "by_kind": {k: {"p50": median(v), "p99": percentile(v, 99)} for k, v in sorted(kinds.items())},
            "slowest": [{"query": q, "project": p is not None, "ms": round(median(times[(q, p)]), 1),
                         "hits": hits[(q, p)]} for q, p in slowest]}  # fmt: skip


COMPLETENESS_WORDS = ("test", "error", "file", "config", "install", "build", "fix", "update")


def run_completeness(db: Path, projects: int = 3) -> dict[str, Any]:
    """A project's search should fill its page from the project's own rows, however busy the others are:
    for the `projects` smallest projects and common words, the rows a 20-hit page stands for (folded
    repeats counted) against the rows that hold the word (SQL over the whole index, capped at 20)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        sql = "SELECT project FROM sessions GROUP BY project ORDER BY sum(event_count) LIMIT ?"
        smallest = [r[0] for r in conn.execute(sql, (projects,))]
        truth = {(p, w): conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM observations_fts f JOIN observations o ON o.id = abs(f.rowid)"
            " WHERE observations_fts MATCH ? AND o.project = ? LIMIT 20)", (w, p)).fetchone()[0]
            for p in smallest for w in COMPLETENESS_WORDS}  # fmt: skip
    finally:
        conn.close()
    full = 0
    shown = 0
    for (project, word), want in truth.items():
        reply = control.ask("search", {"query": word, "project": project, "limit": 20}, timeout=RPC_TIMEOUT_S)
        got = min(20, sum(1 + int(h.get("similar") or 0) for h in reply))
        shown += got
        full += got >= want
    return {"searches": len(truth), "pages_full": full, "rows_shown": shown, "rows_wanted": sum(truth.values()),
            "projects": smallest}  # fmt: skip


SETTLE_TIMEOUT_S = 60.0


def settle(sock: str) -> float:
    """Wait (bounded) until the daemon holds no connection but ours and nothing queued; return the ms waited.

    A client that timed out has left, but the daemon still computes its context: sessions
    start minutes apart, so each run starts on an idle daemon, and the wait is a figure of its own.
    The first SessionStart also has the daemon build its MCP server (~1 s of imports, for the
    agent's MCP connection that follows): that too is over before the next session starts.
    """
    start = time.perf_counter()
    deadline = start + SETTLE_TIMEOUT_S
    while True:
        facts = common.ping_facts(sock)
        idle = not (facts.get("queued") or facts.get("post_commit_pending") or facts.get("mcp_building"))
        if facts.get("connections", 0) <= 1 and idle:
            return (time.perf_counter() - start) * 1000
        if time.perf_counter() > deadline:
            print(f"  warning: daemon still busy after {SETTLE_TIMEOUT_S:.0f} s: {facts}")
            return (time.perf_counter() - start) * 1000
        time.sleep(0.01)


def run_sessionstarts(home: Home, project: str, runs: int) -> dict[str, Any]:
    """The hook client as Claude Code runs it, once per new session; wall ms and whether context came back."""
    argv = [common.PYTHON, "-I", "-S", common.SEND_PY]
    env = home.env()
    walls: list[float] = []
    busy: list[float] = []
    delivered = 0
    for n in range(runs):
        payload = {"session_id": str(uuid.uuid4()), "transcript_path": f"/tmp/nmem-scale-{n}.jsonl", "cwd": project,
                   "hook_event_name": "SessionStart", "source": "startup"}  # fmt: skip
        start = time.perf_counter_ns()
        out = subprocess.run(argv, input=json.dumps(payload).encode(), capture_output=True, env=env,
                             timeout=common.CHILD_TIMEOUT_S, check=True)  # fmt: skip
        walls.append((time.perf_counter_ns() - start) / 1e6)
        delivered += b"additionalContext" in out.stdout
        busy.append(settle(home.socket))
    return {**stats(walls), "first_ms": walls[0], "delivered": delivered / runs, "busy_after_p50_ms": median(busy)}


def use_tree(tree: Path) -> None:
    """Run the daemon, the CLI and the hook client of `tree` (a checkout with its own .venv) instead of this
    one's; the requests are this checkout's (the wire is the same)."""
    global NMEM
    venv = tree.resolve() / ".venv" / "bin"
    if not (venv / "nmemd").exists():
        raise SystemExit(f"--tree {tree}: no .venv/bin/nmemd there")
    common.REPO, common.VENV_BIN = tree.resolve(), venv
    common.PYTHON, common.NMEMD, common.NMEM_SEND = str(venv / "python"), str(venv / "nmemd"), str(venv / "nmem-send")
    common.SEND_PY = str(tree.resolve() / "nmem_client" / "send.py")
    NMEM = str(venv / "nmem")


_HEADING = re.compile(r"^## ([^(:\n]+)", re.MULTILINE)


def run_context_rpc(project: str, runs: int, pid: int | None = None) -> dict[str, Any]:
    """The `context` RPC a SessionStart has the daemon answer (a new session each time), in ms; and the
    sections of the context it returned."""
    walls: list[float] = []
    text = ""
    cpu = daemon_cpu_s(pid)
    for _ in range(runs):
        params = {"project": project, "session_id": str(uuid.uuid4()), "source": "startup"}
        start = time.perf_counter_ns()
        text = control.ask("context", params, timeout=RPC_TIMEOUT_S)["context"]
        walls.append((time.perf_counter_ns() - start) / 1e6)
    return {**stats(walls), "first_ms": walls[0], "chars": len(text),
            "daemon_cpu_ms": (daemon_cpu_s(pid) - cpu) / runs * 1000,
            "sections": [h.strip() for h in _HEADING.findall(text)]}  # fmt: skip


def run_status_rpc(runs: int, pid: int | None = None) -> dict[str, Any]:
    """The `status` RPC (`nmem status`: counts by type, events, the last event's time), in ms."""
    walls: list[float] = []
    facts: dict[str, Any] = {}
    cpu = daemon_cpu_s(pid)
    for _ in range(runs):
        start = time.perf_counter_ns()
        facts = control.ask("status", timeout=RPC_TIMEOUT_S)["database"]
        walls.append((time.perf_counter_ns() - start) / 1e6)
    return {**stats(walls), "observations": facts.get("observations"), "events": facts.get("events"),
            "daemon_cpu_ms": (daemon_cpu_s(pid) - cpu) / runs * 1000}  # fmt: skip


MAINTAIN_JOBS = ("retention", "fts_merge", "vacuum", "optimize", "integrity", "checkpoint")  # `nmem maintain`'s order


def maintain(home: Home, retention: bool) -> list[dict[str, Any]]:
    """`nmem maintain`; without `retention`, job by job without the retention sweep (which would delete
    what is older than its per-type windows, half the rows of a 12-month store, and take long)."""
    argvs = [[]] if retention else [["--job", job] for job in MAINTAIN_JOBS if job != "retention"]
    out: list[dict[str, Any]] = []
    for extra in argvs:
        run = subprocess.run([NMEM, "maintain", "--json", *extra], env=home.env(), capture_output=True, text=True,
                             timeout=MAINTAIN_TIMEOUT_S, check=False)  # fmt: skip
        out += [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
        if run.returncode != 0:  # a failed job is a finding, not the end of the run
            reason = (run.stderr.strip() or run.stdout.strip()).splitlines()[-1:] or ["no output"]
            print(f"  warning: nmem maintain {' '.join(extra)} exited with {run.returncode}: {reason[0]}")
            out.append({"name": " ".join(extra) or "all", "ok": False, "outcome": reason[0], "duration_ms": 0.0})
    return out


def size_facts(db: Path) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10.0)
    try:
        observations = conn.execute("SELECT count(*) FROM observations").fetchone()[0]
        sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
        largest = conn.execute(
            "SELECT project, count(*) FROM observations GROUP BY project ORDER BY 2 DESC LIMIT 1"
        ).fetchone()
        types = dict(conn.execute("SELECT type, count(*) FROM observations GROUP BY type ORDER BY 2 DESC"))
        span = conn.execute("SELECT min(ts), max(ts) FROM observations").fetchone()
    finally:
        conn.close()
    wal = Path(str(db) + "-wal")
    total = db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    return {"observations": observations, "sessions": sessions, "bytes": total,
            "bytes_per_observation": total / max(observations, 1), "largest_project": list(largest),
            "types": types, "days": (span[1] - span[0]) / 86400 if span[0] else 0}  # fmt: skip


def ingest_round(
    db: Path | None, events: int, connections: int, merged: bool = False
) -> tuple[float, float, str, float]:
    """events/s into a copy of `db` (None: an empty store), the daemon's CPU per event (µs: its process,
    every thread, and its extraction worker), how its threads share it and the daemon's and its worker's
    RSS (MB, VmRSS) once the events are in; `merged`: after `nmem maintain --job fts_merge` (untimed), as
    the daily full merge leaves a store, instead of with the merges its import left under way."""
    tag = os.urandom(3).hex()
    frames = [common.frame(body) for body in bench_ingest.make_bodies(events, "unique", tag)]
    with Scratch(db, env=NO_OPTIMIZE) as s:
        if merged:
            subprocess.run([NMEM, "maintain", "--job", "fts_merge", "--json"], env=s.home.env(), capture_output=True,
                           timeout=MAINTAIN_TIMEOUT_S, check=True)  # fmt: skip
        before = common.ping_facts(s.home.socket).get("committed", 0)
        cpu0, threads0 = _daemon_cpu(s.daemon.pid), _threads(s.daemon.pid)
        elapsed, _ = asyncio.run(bench_ingest.load(s.home.socket, frames, connections))
        cpu, threads = _daemon_cpu(s.daemon.pid) - cpu0, _threads(s.daemon.pid)
        # The event loop's thread, then the others (the writer, the checkpointer's worker, ...), busiest first.
        loop = threads.pop(s.daemon.pid, 0.0) - threads0.get(s.daemon.pid, 0.0)
        others = sorted((v - threads0.get(k, 0.0) for k, v in threads.items()), reverse=True)
        split = ", ".join(f"{v / events * 1e6:,.0f}" for v in others[:3])
        committed = common.ping_facts(s.home.socket).get("committed", 0) - before
        pids = [s.daemon.pid, *common.child_pids(s.daemon.pid)]
        rss = sum(common.rss_kb(pid) for pid in pids) / 1024
    if committed != events:
        print(f"  warning: {committed} of {events} events committed")
    return events / (elapsed / 1e9), cpu / events * 1e6, f"loop {loop / events * 1e6:,.0f}, threads {split}", rss


def _threads(pid: int) -> dict[int, float]:
    """CPU seconds of each of the daemon's threads, by thread id."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = bench_ingest.cpu_seconds(pid, int(task.name))
        except OSError:  # the thread ended meanwhile
            continue
    return out


def _daemon_cpu(pid: int) -> float:
    """CPU seconds of the daemon and its children (the extraction worker)."""
    return bench_ingest.cpu_seconds(pid) + sum(bench_ingest.cpu_seconds(kid) for kid in common.child_pids(pid))


def run_ingest(db: Path, events: int, connections: int, rounds: int, merged: bool = False) -> dict[str, Any]:
    big: list[float] = []
    empty: list[float] = []
    merged_runs: list[float] = []
    cpu: dict[str, list[float]] = {"store": [], "empty": [], "store after fts_merge": []}
    rss: dict[str, list[float]] = {"store": [], "empty": [], "store after fts_merge": []}
    stores = [("store", db, big, False), ("empty", None, empty, False)]
    if merged:
        stores.insert(1, ("store after fts_merge", db, merged_runs, True))
    for r in range(rounds):
        # Each round in the other order (store first, then empty first, ...): the machine's load drifts
        # over a run, and a fixed order hands the drift to one side (the store went first, issue #40).
        for label, source, out, merge in stores if r % 2 == 0 else stores[::-1]:
            eps, us, split, mb = ingest_round(source, events, connections, merge)
            out.append(eps)
            cpu[label].append(us)
            rss[label].append(mb)
            print(f"  ingest round {r + 1}: {label} {eps:,.0f} events/s, daemon CPU {us:,.0f} µs/event ({split}),"
                  f" RSS {mb:.1f} MB", flush=True)  # fmt: skip
    out = {"store_eps": median(big), "empty_eps": median(empty), "ratio": median(big) / median(empty),
           "store_runs": big, "empty_runs": empty, "store_cpu_us": median(cpu["store"]),
           "empty_cpu_us": median(cpu["empty"]), "store_cpu_runs": cpu["store"],
           "empty_cpu_runs": cpu["empty"], "store_rss_mb": max(rss["store"]),
           "empty_rss_mb": max(rss["empty"])}  # fmt: skip
    if merged:
        out.update(merged_eps=median(merged_runs), merged_ratio=median(merged_runs) / median(empty),
                   merged_runs=merged_runs)  # fmt: skip
    return out


# --- report ------------------------------------------------------------------------------------


def row(name: str, value: str, target: str = "", ok: bool | None = None) -> str:
    mark = "" if ok is None else common.verdict(ok)
    return f"  {name:<40} {value:>16}   {target:<12} {mark}"


def ms_row(name: str, value: float, target: float) -> str:
    return row(name, f"{value:,.1f} ms", f"<= {target:.0f} ms", value <= target)


def report(r: dict[str, Any]) -> None:
    """The summary table: each figure beside its target."""
    t, size = TARGETS, r["size"]
    print(f"\nsummary: {size['observations']:,} observations, {size['sessions']:,} sessions, largest project"
          f" {size['largest_project'][1]:,}; store built in {r['build_seconds']:.0f} s")  # fmt: skip
    print(row("figure", "value", "target"))
    for label, key in (("search, fresh", "search_fresh"), ("search, after maintain", "search_maintained")):
        if s := r.get(key):
            print(ms_row(f"{label} p50", s["p50"], t["search_p50_ms"]))
            print(row(f"{label} p95", f"{s['p95']:,.1f} ms"))
            print(ms_row(f"{label} p99", s["p99"], t["search_p99_ms"]))
    for label, key in (("SessionStart, fresh", "sessionstart_fresh"), ("SessionStart, after maintain",
                       "sessionstart_maintained")):  # fmt: skip
        if s := r.get(key):
            print(ms_row(f"{label} p50", s["p50"], t["sessionstart_p50_ms"]))
            print(ms_row(f"{label} p99", s["p99"], t["sessionstart_p99_ms"]))
            print(row(f"{label} delivered", f"{s['delivered']:.0%}", "100 %", s["delivered"] >= 1.0))
    if cr := r.get("context_rpc"):
        print(ms_row("context RPC p50", cr["p50"], t["context_rpc_p50_ms"]))
        print(row("context RPC p99", f"{cr['p99']:,.1f} ms"))
    if st := r.get("status_rpc"):
        print(ms_row("status RPC p50", st["p50"], t["status_rpc_p50_ms"]))
    bpo = size["bytes_per_observation"]
    print(row("bytes per observation", f"{bpo:,.0f}", f"<= {t['bytes_per_observation']:,.0f}",
              bpo <= t["bytes_per_observation"]))  # fmt: skip
    if ing := r.get("ingest"):
        print(row("ingest, store / empty", f"{ing['ratio']:.2f}x", f">= {t['ingest_ratio']}x",
                  ing["ratio"] >= t["ingest_ratio"]))  # fmt: skip
        if "store_cpu_us" in ing:
            cpu = f"{ing['store_cpu_us']:,.0f} / {ing['empty_cpu_us']:,.0f}"
            print(row("  daemon CPU µs/event, store / empty", cpu, "", None))
        print(row("  events/s, store / empty", f"{ing['store_eps']:,.0f} / {ing['empty_eps']:,.0f}"))
        if "store_rss_mb" in ing:
            mb = f"{ing['store_rss_mb']:.1f} / {ing['empty_rss_mb']:.1f} MB"
            print(row("  daemon + worker RSS, store / empty", mb))  # the target's figure: bench_daemon.py
        if "merged_ratio" in ing:
            ratio = ing["merged_ratio"]
            print(row("ingest, merged store / empty", f"{ratio:.2f}x", f">= {t['ingest_ratio']}x",
                      ratio >= t["ingest_ratio"]))  # fmt: skip
    if "maintain_seconds" in r:
        print(row("nmem maintain", f"{r['maintain_seconds']:.0f} s"))


def print_search(label: str, s: dict[str, Any]) -> None:
    print(f"  {label}: {s['queries']} queries x {s['rounds']}: p50 {s['p50']:.1f} ms, p95 {s['p95']:.1f} ms,"
          f" p99 {s['p99']:.1f} ms, max {s['max']:.0f} ms; daemon CPU"
          f" {s.get('daemon_cpu_ms', math.nan):.2f} ms a search")  # fmt: skip
    for kind, v in s["by_kind"].items():
        print(f"    {kind:<22} p50 {v['p50']:8.1f} ms  p99 {v['p99']:8.1f} ms")
    print("    slowest: " + "; ".join(f"{x['query']!r}{' +project' if x['project'] else ''} {x['ms']:.0f} ms"
                                       for x in s["slowest"][:5]))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=DEFAULT_STORE, help="directory of the cached stores (and the seed)")
    parser.add_argument("--observations", type=int, default=1_000_000, help="size of the generated store")
    parser.add_argument("--rebuild", action="store_true", help="build the store again even if cached")
    parser.add_argument("--build-only", action="store_true", help="build (or find) the store and stop")
    parser.add_argument("--search-rounds", type=int, default=2, help="times each query runs")
    parser.add_argument("--starts", type=int, default=50, help="SessionStart runs per phase")
    parser.add_argument("--ingest-events", type=int, default=20_000)
    parser.add_argument("--ingest-rounds", type=int, default=2, help="rounds each, store and empty, alternating")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--ingest-merged", action="store_true",
                        help="ingest also into the store after `nmem maintain --job fts_merge` (as the daily"
                        " merge leaves it)")  # fmt: skip
    parser.add_argument("--skip", action="append", default=[], choices=["search", "sessionstart", "maintain", "ingest"])
    parser.add_argument("--retention", action="store_true", help="`nmem maintain` with its retention sweep too")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object at the end")
    parser.add_argument("--tree", type=Path, help="run the daemon, CLI and hook client of this checkout (a baseline)")
    parser.add_argument("--rpcs", type=int, default=100, help="context and status RPCs after the SessionStarts")
    common.add_quiet_arg(parser)
    args = parser.parse_args()
    common.wait_quiet(args.wait_quiet)
    if args.tree is not None:
        use_tree(args.tree)
    common.print_machine()

    db, meta = cached(Path(args.store), args.observations, args.rebuild)
    results: dict[str, Any] = {"store": str(db), "build_seconds": meta["build_seconds"], "size": size_facts(db)}
    size = results["size"]
    print(f"store: {size['observations']:,} observations, {size['sessions']:,} sessions, {size['days']:.0f} days,"
          f" largest project {size['largest_project'][0]} ({size['largest_project'][1]:,}),"
          f" {size['bytes'] / 1e6:,.0f} MB ({size['bytes_per_observation']:,.0f} B/observation)")  # fmt: skip
    if args.build_only:
        return
    project = meta["largest"]
    queries = meta["queries"]
    if "search" not in args.skip:
        with Scratch(db, env=NO_OPTIMIZE) as s:
            results["search_fresh"] = run_searches(queries, project, args.search_rounds, s.daemon.pid)
            results["search_fresh"]["analysed"] = s.analysed()
            results["completeness"] = run_completeness(Path(s.home.db))
        print_search("search, fresh store", results["search_fresh"])
        c = results["completeness"]
        print(f"  a project's own rows, 3 smallest projects x {len(COMPLETENESS_WORDS)} common words: pages as"
              f" full as the project allows {c['pages_full']}/{c['searches']},"
              f" rows {c['rows_shown']}/{c['rows_wanted']}")  # fmt: skip
        print(f"    planner statistics after the phase: {analysed(results['search_fresh'])}")
    if "sessionstart" not in args.skip:
        with Scratch(db, env=NO_OPTIMIZE) as s:
            results["sessionstart_fresh"] = run_sessionstarts(s.home, project, args.starts)
            results["sessionstart_fresh"]["analysed"] = s.analysed()
            results["context_rpc"] = run_context_rpc(project, args.rpcs, s.daemon.pid)
            results["status_rpc"] = run_status_rpc(args.rpcs, s.daemon.pid)
        ss = results["sessionstart_fresh"]
        print(f"  SessionStart, fresh store: p50 {ss['p50']:.1f} ms, p99 {ss['p99']:.1f} ms, first {ss['first_ms']:.0f}"
              f" ms, delivered {ss['delivered']:.0%}; daemon busy after the client returned: p50"
              f" {ss['busy_after_p50_ms']:.0f} ms; planner statistics after the phase: {analysed(ss)}")  # fmt: skip
        cr, st = results["context_rpc"], results["status_rpc"]
        print(f"  context RPC: p50 {cr['p50']:.1f} ms, p99 {cr['p99']:.1f} ms, first {cr['first_ms']:.1f} ms,"
              f" daemon CPU {cr['daemon_cpu_ms']:.2f} ms a call;"
              f" {cr['chars']:,} chars, sections: {'; '.join(cr['sections'])}")  # fmt: skip
        print(f"  status RPC: p50 {st['p50']:.1f} ms, p99 {st['p99']:.1f} ms, daemon CPU {st['daemon_cpu_ms']:.2f} ms a"
              f" call ({st['observations']:,} observations,"
              f" {st['events']:,} events)")  # fmt: skip
    if "maintain" not in args.skip:
        with Scratch(db) as s:
            start = time.perf_counter()
            results["maintain"] = maintain(s.home, args.retention)
            results["maintain_seconds"] = time.perf_counter() - start
            results["maintained_size"] = size_facts(Path(s.home.db))
            results["maintained_size"]["analysed"] = s.analysed()
            left = results["maintained_size"]["observations"]
            print(f"  nmem maintain{'' if args.retention else ' (all jobs but retention)'}:"
                  f" {results['maintain_seconds']:.0f} s, {left:,} observations, sqlite_stat1"
                  f" {'present' if results['maintained_size']['analysed'] else 'absent'}")  # fmt: skip
            for job in results["maintain"]:
                print(f"    {job['name']}: {job['outcome']} ({job['duration_ms'] / 1000:.1f} s)")
            if "sessionstart" not in args.skip:
                results["sessionstart_maintained"] = run_sessionstarts(s.home, project, args.starts)
                ss = results["sessionstart_maintained"]
                print(f"  SessionStart, after maintain: p50 {ss['p50']:.1f} ms, p99 {ss['p99']:.1f} ms, delivered"
                      f" {ss['delivered']:.0%}; daemon busy after: p50 {ss['busy_after_p50_ms']:.0f} ms")  # fmt: skip
            if "search" not in args.skip:
                results["search_maintained"] = run_searches(queries, project, args.search_rounds)
                print_search("search, after maintain", results["search_maintained"])
    if "ingest" not in args.skip:
        results["ingest"] = run_ingest(db, args.ingest_events, args.connections, args.ingest_rounds, args.ingest_merged)
    report(results)
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
